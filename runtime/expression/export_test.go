package expression

import (
	"strings"

	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/vm"
)

// Literal exposes a program's precomputed literal, and RunVM runs it on a
// fresh virtual machine, so tests can hold one to the other.
func Literal(p *Program) (any, bool) { return p.lit, p.hasLit }

func RunVM(p *Program, vars map[string]any) (any, error) { return new(vm.VM).Run(p.prog, vars) }

// FastEval runs a program's fast path alone: ok is false when it has none
// or it gave up.
func FastEval(p *Program, f *Frame) (any, bool) {
	if p.fast == nil {
		return nil, false
	}
	return p.fast(f)
}

// Checked reports whether the program calls an exact operation (one the
// patcher put in for +, - or * over ints).
func Checked(p *Program) bool {
	found := false
	n := p.prog.Node()
	ast.Walk(&n, &visitor{fn: func(n ast.Node) {
		if c, ok := n.(*ast.CallNode); ok {
			if _, isConst := c.Callee.(*ast.ConstantNode); isConst {
				found = true
			}
		}
	}})
	return found
}

// TextsKept is how many texts the text functions keep read.
func TextsKept() int {
	texts.RLock()
	defer texts.RUnlock()
	return len(texts.m)
}

const TextsBound = textsKept

// ReflectiveCalls lists the program's calls the machine makes by
// reflection (its instructions OpCall), each as the instruction before it
// and the call.
func ReflectiveCalls(p *Program) []string {
	lines := strings.Split(p.prog.Disassemble(), "\n")
	var out []string
	for i, l := range lines {
		if f := strings.Fields(l); len(f) > 1 && f[1] == "OpCall" {
			out = append(out, strings.Join(strings.Fields(lines[max(i-1, 0)]), " ")+" / "+strings.Join(f, " "))
		}
	}
	return out
}
