// JUnit XML, as CI systems read test results: a test suite per dataset,
// a test case per case and per ranking.

package eval

import (
	"encoding/xml"
	"fmt"
	"io"
	"path/filepath"
	"strings"
)

// JUnitSuites is the root of a JUnit XML report (the shape Jenkins,
// GitLab and GitHub's test reporters read).
type JUnitSuites struct {
	XMLName  xml.Name     `xml:"testsuites"`
	Name     string       `xml:"name,attr"`
	Tests    int          `xml:"tests,attr"`
	Failures int          `xml:"failures,attr"`
	Errors   int          `xml:"errors,attr"`
	Skipped  int          `xml:"skipped,attr"`
	Time     float64      `xml:"time,attr"`
	Suites   []JUnitSuite `xml:"testsuite"`
}

// JUnitSuite is one dataset.
type JUnitSuite struct {
	Name       string          `xml:"name,attr"`
	Tests      int             `xml:"tests,attr"`
	Failures   int             `xml:"failures,attr"`
	Errors     int             `xml:"errors,attr"`
	Skipped    int             `xml:"skipped,attr"`
	Time       float64         `xml:"time,attr"`
	Timestamp  string          `xml:"timestamp,attr"`
	Properties []JUnitProperty `xml:"properties>property"`
	Cases      []JUnitCase     `xml:"testcase"`
}

// JUnitProperty is a name and value of a suite.
type JUnitProperty struct {
	Name  string `xml:"name,attr"`
	Value string `xml:"value,attr"`
}

// JUnitCase is one case or ranking.
type JUnitCase struct {
	Name      string        `xml:"name,attr"`
	ClassName string        `xml:"classname,attr"`
	File      string        `xml:"file,attr,omitempty"`
	Line      int           `xml:"line,attr,omitempty"`
	Time      float64       `xml:"time,attr"`
	Failure   *JUnitProblem `xml:"failure"`
	Error     *JUnitProblem `xml:"error"`
	Skipped   *JUnitProblem `xml:"skipped"`
	SystemOut string        `xml:"system-out,omitempty"`
}

// JUnitProblem is a failure, an error or a skip: a message and details.
type JUnitProblem struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr,omitempty"`
	Text    string `xml:",chardata"`
}

// JUnit builds the JUnit report of the reports: a case that fails, passes
// though marked xfail, or regressed is a failure; a case on a flow that
// does not load an error; a known failure (xfail) a skipped test, with
// its reason.
func JUnit(reports []*Report) JUnitSuites {
	out := JUnitSuites{Name: "trellis eval"}
	for _, r := range reports {
		s := JUnitSuite{Name: r.Dataset, Time: float64(r.TookMS) / 1000, Timestamp: r.Started.Format("2006-01-02T15:04:05")}
		s.Properties = append(s.Properties, JUnitProperty{"flow", r.Flow}, JUnitProperty{"version", r.Versions[0].Label}, JUnitProperty{"repeat", fmt.Sprint(r.Repeat)})
		if len(r.Versions) > 1 {
			s.Properties = append(s.Properties, JUnitProperty{"compared_with", r.Versions[1].Label})
		}
		class := strings.TrimSuffix(filepath.Base(r.Dataset), ".yaml")
		for _, c := range r.Cases {
			now := c.Results[0]
			jc := JUnitCase{Name: c.Name, ClassName: class, File: r.Dataset, Line: c.Line}
			var took int64
			for _, run := range now.Repeats {
				took += run.TookMS
			}
			jc.Time = float64(took) / 1000
			var details strings.Builder
			for _, f := range now.Failures {
				fmt.Fprintf(&details, "%s: %s: %s\n", f.Pos, f.Check, f.Reason)
			}
			switch c.Status {
			case Failed, XPass:
				jc.Failure = &JUnitProblem{Message: now.Reason, Type: string(c.Status), Text: details.String()}
			case Errored:
				jc.Error = &JUnitProblem{Message: now.Reason, Type: "error", Text: details.String()}
			case XFail:
				jc.Skipped = &JUnitProblem{Message: "known failure (xfail): " + firstNonEmpty(c.XFail, now.Reason), Text: details.String()}
			}
			if c.Regressed && jc.Failure == nil {
				jc.Failure = &JUnitProblem{Type: "regressed", Message: fmt.Sprintf("its pass rate dropped from %s on %s to %s", percent(c.Results[1].PassRate), r.Versions[1].Label, percent(now.PassRate))}
			}
			if len(now.Repeats) > 0 {
				jc.SystemOut = transcriptText(now.Repeats[0])
			}
			s.add(jc)
		}
		for _, rk := range r.Rankings {
			res := rk.Results[0]
			jc := JUnitCase{Name: "ranking by " + rk.By + ": " + strings.Join(rk.Order, " > "), ClassName: class, File: r.Dataset, Line: rk.Line}
			switch rk.Status {
			case Failed, XPass:
				jc.Failure = &JUnitProblem{Message: res.Reason, Type: string(rk.Status)}
			case Errored:
				jc.Error = &JUnitProblem{Message: res.Reason, Type: "error"}
			case XFail:
				jc.Skipped = &JUnitProblem{Message: "known failure (xfail): " + rk.XFail, Text: res.Reason}
			}
			s.add(jc)
		}
		out.Tests += s.Tests
		out.Failures += s.Failures
		out.Errors += s.Errors
		out.Skipped += s.Skipped
		out.Time += s.Time
		out.Suites = append(out.Suites, s)
	}
	return out
}

func (s *JUnitSuite) add(c JUnitCase) {
	s.Tests++
	switch {
	case c.Failure != nil:
		s.Failures++
	case c.Error != nil:
		s.Errors++
	case c.Skipped != nil:
		s.Skipped++
	}
	s.Cases = append(s.Cases, c)
}

// WriteJUnit writes the reports as JUnit XML.
func WriteJUnit(w io.Writer, reports []*Report) error {
	b, err := xml.MarshalIndent(JUnit(reports), "", "  ")
	if err != nil {
		return err
	}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	// (encoding/xml writes a character XML cannot hold, which a model's
	// reply may carry, as U+FFFD)
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// transcriptText is a run's transcript as text.
func transcriptText(run *RunResult) string {
	var b strings.Builder
	for _, t := range run.Turns {
		if t.Message != "" {
			fmt.Fprintf(&b, "[turn %d] person: %s\n", t.Turn, t.Message)
		}
		if t.Answers != nil {
			fmt.Fprintf(&b, "[turn %d] answers: %s\n", t.Turn, textOf(t.Answers))
		} else if len(t.Input) > 0 {
			fmt.Fprintf(&b, "[turn %d] input: %s\n", t.Turn, textOf(t.Input))
		}
		if t.Reply != "" {
			fmt.Fprintf(&b, "[turn %d] flow: %s\n", t.Turn, t.Reply)
		}
		if t.Error != "" {
			fmt.Fprintf(&b, "[turn %d] error: %s\n", t.Turn, t.Error)
		}
	}
	if run.Output != "" {
		fmt.Fprintf(&b, "output:\n%s\n", run.Output)
	}
	return b.String()
}
