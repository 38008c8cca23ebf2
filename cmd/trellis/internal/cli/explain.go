package cli

import (
	"context"
	"fmt"
	"io/fs"
	"strings"

	"github.com/trellisflow/trellis/runtime/diag"
)

// cmdExplain says what a diagnostic code protects against, with its
// failing example, what validate says of it, the fix, and how to accept
// the warning deliberately.
func cmdExplain(_ context.Context, env *Env, args []string) int {
	fs := flags(env, "explain")
	pos, code, ok := parse(fs, args)
	if !ok {
		return code
	}
	switch len(pos) {
	case 0:
		for _, d := range diag.Codes {
			fmt.Fprintf(env.Stdout, "%s  %s\n", d.Code, d.Doc)
		}
		return 0
	case 1:
	default:
		fmt.Fprintln(env.Stderr, "trellis explain: give one code, such as G013, or none to list them all")
		return 2
	}
	c := diag.Code(strings.ToUpper(pos[0]))
	if c.Doc() == "" {
		var known []string
		for _, d := range diag.Codes {
			known = append(known, string(d.Code))
		}
		msg := fmt.Sprintf("trellis explain: %q is not a diagnostic code", pos[0])
		if s := diag.Suggest(string(c), known); s != "" {
			msg += fmt.Sprintf("; did you mean %q?", s)
		}
		fmt.Fprintln(env.Stderr, msg)
		return 2
	}
	fmt.Fprint(env.Stdout, explain(c))
	return 0
}

// explain renders a code's explanation from its examples.
func explain(c diag.Code) string {
	read := func(name string) string {
		b, err := fs.ReadFile(diag.Examples, "examples/"+name)
		if err != nil {
			return ""
		}
		return string(b)
	}
	bad, ok, said := read(string(c)+".bad.yaml"), read(string(c)+".ok.yaml"), read(string(c)+".bad.diags")
	var b strings.Builder
	warns, errs := strings.Contains(said, "warning["+string(c)+"]"), strings.Contains(said, "error["+string(c)+"]")
	if strings.Contains(c.Doc(), "a warning where") {
		warns = true
	}
	kind := "an error"
	switch {
	case warns && errs:
		kind = "an error or a warning"
	case warns:
		kind = "a warning"
	}
	fmt.Fprintf(&b, "%s: %s.\n\nIt is %s.", c, c.Doc(), kind)
	b.WriteString("\n\nA flow that breaks the rule:\n\n")
	b.WriteString(indent(bad))
	if p := read("prompts/" + string(c) + ".bad.prompt"); p != "" {
		fmt.Fprintf(&b, "\nwith prompts/%s.bad.prompt:\n\n%s", c, indent(p))
	}
	fmt.Fprintf(&b, "\ntrellis validate says:\n\n%s", indent(said))
	b.WriteString("\nThe fix:\n\n")
	b.WriteString(indent(change(bad, ok)))
	if p := read("prompts/" + string(c) + ".ok.prompt"); p != "" {
		fmt.Fprintf(&b, "\nwith prompts/%s.ok.prompt:\n\n%s", c, indent(p))
	} else if strings.Contains(ok, "prompt: ok") {
		fmt.Fprintf(&b, "\nwith prompts/ok.prompt:\n\n%s", indent(read("prompts/ok.prompt")))
	}
	if warns {
		fmt.Fprintf(&b, "\nTo accept its warnings in a flow deliberately, list the code in the flow:\n\n    lint:\n      ignore: [%s]\n\n"+
			"Every %s warning of that flow is then not reported; errors cannot be ignored.\n", c, c)
	} else {
		b.WriteString("\nAn error stops the flow from loading: it cannot be ignored, only fixed.\n")
	}
	return b.String()
}

// change shows how ok differs from bad: the lines that differ, "-" for
// bad's and "+" for ok's, with two lines around them.
func change(bad, ok string) string {
	a, z := strings.Split(strings.TrimSuffix(bad, "\n"), "\n"), strings.Split(strings.TrimSuffix(ok, "\n"), "\n")
	pre := 0
	for pre < len(a) && pre < len(z) && a[pre] == z[pre] {
		pre++
	}
	post := 0
	for post < len(a)-pre && post < len(z)-pre && a[len(a)-1-post] == z[len(z)-1-post] {
		post++
	}
	var b strings.Builder
	from := max(pre-2, 0)
	if from > 0 {
		b.WriteString("  ...\n")
	}
	for _, l := range a[from:pre] {
		b.WriteString("  " + l + "\n")
	}
	for _, l := range a[pre : len(a)-post] {
		b.WriteString("- " + l + "\n")
	}
	for _, l := range z[pre : len(z)-post] {
		b.WriteString("+ " + l + "\n")
	}
	to := min(len(a)-post+2, len(a))
	for _, l := range a[len(a)-post : to] {
		b.WriteString("  " + l + "\n")
	}
	if to < len(a) {
		b.WriteString("  ...\n")
	}
	return b.String()
}

func indent(s string) string {
	if s == "" {
		return ""
	}
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = "    " + l
	}
	return strings.Join(lines, "\n") + "\n"
}
