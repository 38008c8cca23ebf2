package expression

import (
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
