// Writing reports: a terminal table, JSON, GitHub annotations and a
// Markdown summary for a pull request (JUnit XML is in junit.go).

package eval

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
)

// WriteJSON writes the reports as a JSON array.
func WriteJSON(w io.Writer, reports []*Report) error {
	if reports == nil {
		reports = []*Report{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(reports)
}

// mark is how a status reads in the terminal.
func mark(s Status) string {
	switch s {
	case Passed:
		return "pass"
	case Failed:
		return "FAIL"
	case XFail:
		return "xfail"
	case XPass:
		return "XPASS"
	}
	return "ERROR"
}

// WriteText writes the reports as tables: each case's status, pass rate
// and scores (beside the compared version's, with the change), the
// reasons of failures at their lines, the rankings and a summary.
func WriteText(w io.Writer, reports []*Report) error {
	var b strings.Builder
	for i, r := range reports {
		if i > 0 {
			b.WriteByte('\n')
		}
		writeText(&b, r)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func writeText(b *strings.Builder, r *Report) {
	cmp := len(r.Versions) > 1
	fmt.Fprintf(b, "%s: %s, %s per case", r.Dataset, r.Versions[0].Label, plural(r.Repeat, "run", "runs"))
	if cmp {
		fmt.Fprintf(b, ", compared with %s", r.Versions[1].Label)
	}
	b.WriteString("\n")
	for _, v := range r.Versions {
		if v.Error != "" {
			fmt.Fprintf(b, "  %s: %s\n", v.Label, v.Error)
		}
	}
	nameW := len("CASE")
	for _, c := range r.Cases {
		nameW = max(nameW, min(len([]rune(c.Name)), 48))
	}
	passHead := "PASS"
	if cmp {
		passHead = "PASS (" + r.Versions[1].Label + " → now)"
	}
	rows := make([][3]string, len(r.Cases))
	passW := len([]rune(passHead))
	for i, c := range r.Cases {
		now := c.Results[0]
		pass := fmt.Sprintf("%d/%d", now.Passed, now.Runs)
		if cmp {
			before := c.Results[1]
			pass = fmt.Sprintf("%d/%d → %s", before.Passed, before.Runs, pass)
			if before.Status == Errored {
				pass = "- → " + fmt.Sprintf("%d/%d", now.Passed, now.Runs)
			}
			if c.Regressed {
				pass += " regressed"
			}
		}
		rows[i] = [3]string{mark(c.Status), cut(c.Name, 48), pass}
		passW = max(passW, len([]rune(pass)))
	}
	fmt.Fprintf(b, "  %-6s %-*s  %-*s  %s\n", "", nameW, "CASE", passW, passHead, "SCORES")
	for i, c := range r.Cases {
		fmt.Fprintf(b, "  %-6s %-*s  %-*s  %s\n", rows[i][0], nameW, rows[i][1], passW, rows[i][2], scoresText(c, cmp))
		now := c.Results[0]
		if c.Status == Passed {
			if c.Regressed {
				fmt.Fprintf(b, "         passed %s of its runs on %s\n", percent(c.Results[1].PassRate), r.Versions[1].Label)
			}
			continue
		}
		if c.XFail != "" {
			fmt.Fprintf(b, "         known failure: %s\n", c.XFail)
		}
		if c.Status == XPass || len(now.Failures) == 0 && now.Reason != "" {
			fmt.Fprintf(b, "         %s\n", now.Reason)
		}
		for _, f := range now.Failures {
			runs := ""
			if now.Runs > 1 {
				runs = fmt.Sprintf(" (%d of %d runs)", f.Runs, now.Runs)
			}
			known := ""
			if f.XFail != "" {
				known = " [known failure: " + f.XFail + "]"
			}
			fmt.Fprintf(b, "         %s: %s%s: %s%s\n", f.Pos, f.Check, runs, f.Reason, known)
		}
	}
	if len(r.Rankings) > 0 {
		b.WriteString("  rankings\n")
		for _, rk := range r.Rankings {
			fmt.Fprintf(b, "  %-6s by %s: %s\n", mark(rk.Status), rk.By, rankingText(rk, 0))
			if cmp {
				fmt.Fprintf(b, "         on %s: %s\n", r.Versions[1].Label, rankingText(rk, 1))
			}
			if res := rk.Results[0]; res.Reason != "" && rk.Status != Passed {
				fmt.Fprintf(b, "         %s: %s\n", rk.Pos, res.Reason)
			}
			if rk.Status == XFail {
				fmt.Fprintf(b, "         known failure: %s\n", rk.XFail)
			}
		}
	}
	fmt.Fprintf(b, "%s in %.1fs\n", summaryText(r.Summary), float64(r.TookMS)/1000)
}

// scoresText lists a case's scores (and the change from the compared
// version).
func scoresText(c *CaseReport, cmp bool) string {
	now := c.Results[0]
	var parts []string
	for _, s := range now.Scores {
		p := fmt.Sprintf("%s %s", s.Name, fmtScore(s.Value))
		if cmp {
			if old, ok := scoreOf(c.Results[1], s.Name); ok {
				p = fmt.Sprintf("%s %s → %s (%s)", s.Name, fmtScore(old), fmtScore(s.Value), delta(s.Value-old))
			}
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, ", ")
}

func scoreOf(r *CaseResult, name string) (float64, bool) {
	for _, s := range r.Scores {
		if s.Name == name && !math.IsNaN(s.Value) {
			return s.Value, true
		}
	}
	return 0, false
}

func fmtScore(f float64) string {
	if math.IsNaN(f) {
		return "-"
	}
	return fmtNum(math.Round(f*100) / 100)
}

func delta(d float64) string {
	d = math.Round(d*100) / 100
	switch {
	case d > 0:
		return "+" + fmtNum(d)
	case d < 0:
		return fmtNum(d)
	}
	return "±0"
}

func rankingText(rk *RankingReport, v int) string {
	if v >= len(rk.Results) {
		return ""
	}
	res := rk.Results[v]
	parts := make([]string, len(rk.Order))
	for i, name := range rk.Order {
		val := "-"
		if i < len(res.Values) && res.Values[i] != nil {
			val = fmtScore(*res.Values[i])
		}
		parts[i] = fmt.Sprintf("%s (%s)", name, val)
	}
	return strings.Join(parts, " > ")
}

func summaryText(s Summary) string {
	parts := []string{fmt.Sprintf("%d passed", s.Passed)}
	for _, p := range []struct {
		n         int
		one, many string
	}{{s.Failed, "failed", "failed"}, {s.XFail, "with known failures (xfail)", "with known failures (xfail)"},
		{s.XPass, "passing where marked xfail", "passing where marked xfail"}, {s.Errors, "error", "errors"}, {s.Regressed, "regressed", "regressed"}} {
		if p.n > 0 {
			parts = append(parts, plural(p.n, p.one, p.many))
		}
	}
	out := plural(s.Cases, "case", "cases") + ": " + strings.Join(parts, ", ")
	if s.Rankings > 0 {
		out += fmt.Sprintf("; %d of %s failed", s.RankFailed, plural(s.Rankings, "ranking", "rankings"))
	}
	return out
}

func cut(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// WriteGitHub writes GitHub Actions workflow commands: an error on the
// line of each check that fails (and of each case that regressed, or
// passes though marked xfail), and a notice for each known failure.
func WriteGitHub(w io.Writer, reports []*Report) error {
	var b strings.Builder
	annotate := func(level, file string, line int, title, msg string) {
		fmt.Fprintf(&b, "::%s file=%s,line=%d,title=%s::%s\n", level, ghProperty(file), max(line, 1), ghProperty(title), ghData(msg))
	}
	for _, r := range reports {
		for _, v := range r.Versions {
			if v.Error != "" {
				annotate("error", r.Dataset, 1, "eval: "+v.Label, v.Error)
			}
		}
		for _, c := range r.Cases {
			now := c.Results[0]
			title := "eval: " + c.Name
			switch c.Status {
			case Failed, Errored, XFail:
				if len(now.Failures) == 0 {
					annotate("error", r.Dataset, c.Line, title, now.Reason)
				}
				for _, f := range now.Failures {
					switch {
					case c.XFail != "":
						annotate("notice", r.Dataset, f.Line, title+" (known failure)", c.XFail+": "+f.Check+": "+f.Reason)
					case f.XFail != "":
						annotate("notice", r.Dataset, f.Line, title+" (known failure)", f.XFail+": "+f.Check+": "+f.Reason)
					default:
						annotate("error", r.Dataset, f.Line, title, f.Check+": "+f.Reason)
					}
				}
			case XPass:
				annotate("error", r.Dataset, c.Line, title, now.Reason)
			}
			if c.Regressed {
				annotate("error", r.Dataset, c.Line, title+" regressed", fmt.Sprintf("its pass rate dropped from %s on %s to %s", percent(c.Results[1].PassRate), r.Versions[1].Label, percent(now.PassRate)))
			}
		}
		for _, rk := range r.Rankings {
			res := rk.Results[0]
			switch rk.Status {
			case Failed, XPass, Errored:
				annotate("error", r.Dataset, rk.Line, "eval ranking by "+rk.By, res.Reason)
			case XFail:
				annotate("notice", r.Dataset, rk.Line, "eval ranking by "+rk.By+" (known failure)", rk.XFail+": "+res.Reason)
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func ghData(s string) string {
	return strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A").Replace(s)
}

func ghProperty(s string) string {
	return strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A", ":", "%3A", ",", "%2C").Replace(s)
}

// WriteMarkdown writes a summary for a pull request: per dataset, a table
// of the cases with their pass rates and scores (with the compared
// version's and the change), then the failures' reasons.
func WriteMarkdown(w io.Writer, reports []*Report) error {
	var b strings.Builder
	for _, r := range reports {
		cmp := len(r.Versions) > 1
		fmt.Fprintf(&b, "### Eval of `%s` on `%s`\n\n", mdCode(r.Dataset), mdCode(r.Versions[0].Label))
		verdict := "✅ passes"
		if !r.Summary.OK {
			verdict = "❌ fails"
		}
		fmt.Fprintf(&b, "%s: %s, %s per case", verdict, summaryText(r.Summary), plural(r.Repeat, "run", "runs"))
		if cmp {
			fmt.Fprintf(&b, ", compared with `%s`", mdCode(r.Versions[1].Label))
		}
		b.WriteString(".\n\n")
		for _, v := range r.Versions {
			if v.Error != "" {
				fmt.Fprintf(&b, "> `%s` was not evaluated: %s\n\n", mdCode(v.Label), mdCell(v.Error))
			}
		}
		if cmp {
			fmt.Fprintf(&b, "| | Case | Pass rate (`%s` → now) | Scores (`%s` → now) |\n|---|---|---|---|\n", mdCode(r.Versions[1].Label), mdCode(r.Versions[1].Label))
		} else {
			b.WriteString("| | Case | Pass rate | Scores |\n|---|---|---|---|\n")
		}
		for _, c := range r.Cases {
			now := c.Results[0]
			rate := percent(now.PassRate)
			if cmp {
				rate = percent(c.Results[1].PassRate) + " → " + rate
				if c.Results[1].Status == Errored {
					rate = "– → " + percent(now.PassRate)
				}
				if c.Regressed {
					rate += " ⬇️"
				}
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", mdMark(c.Status), mdCell(c.Name), rate, mdCell(scoresText(c, cmp)))
		}
		if len(r.Rankings) > 0 {
			b.WriteString("\n| | Ranking | Scores |\n|---|---|---|\n")
			for _, rk := range r.Rankings {
				fmt.Fprintf(&b, "| %s | by %s | %s |\n", mdMark(rk.Status), mdCell(rk.By), mdCell(rankingText(rk, 0)))
			}
		}
		var details strings.Builder
		for _, c := range r.Cases {
			now := c.Results[0]
			switch c.Status {
			case Passed:
				continue
			}
			fmt.Fprintf(&details, "- **%s**, line %d", mdCell(c.Name), c.Line)
			if c.XFail != "" {
				fmt.Fprintf(&details, " (known failure: %s)", mdCell(c.XFail))
			}
			details.WriteString(":\n")
			if len(now.Failures) == 0 || c.Status == XPass {
				fmt.Fprintf(&details, "  - %s\n", mdCell(now.Reason))
			}
			for _, f := range now.Failures {
				known := ""
				if f.XFail != "" {
					known = " (known failure: " + mdCell(f.XFail) + ")"
				}
				fmt.Fprintf(&details, "  - line %d, %s: %s%s\n", f.Line, mdCell(f.Check), mdCell(f.Reason), known)
			}
		}
		for _, rk := range r.Rankings {
			if rk.Status != Passed {
				fmt.Fprintf(&details, "- ranking by **%s**, line %d: %s\n", mdCell(rk.By), rk.Line, mdCell(rk.Results[0].Reason))
			}
		}
		if details.Len() > 0 {
			fmt.Fprintf(&b, "\n<details><summary>Failures and known failures</summary>\n\n%s\n</details>\n", details.String())
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func mdMark(s Status) string {
	switch s {
	case Passed:
		return "✅"
	case XFail:
		return "⚠️ xfail"
	case XPass:
		return "❌ xpass"
	case Errored:
		return "❌ error"
	}
	return "❌"
}

// mdCell makes text safe in a Markdown table cell: no line breaks, pipes
// escaped, HTML shown as text.
func mdCell(s string) string {
	s = strings.NewReplacer("\r", " ", "\n", " ", "|", `\|`, "<", "&lt;", ">", "&gt;", "`", "'").Replace(s)
	return cut(s, 400)
}

func mdCode(s string) string { return strings.ReplaceAll(s, "`", "'") }
