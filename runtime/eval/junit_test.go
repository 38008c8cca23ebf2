package eval_test

import (
	"bytes"
	"context"
	"encoding/xml"
	"io"
	"strings"
	"testing"

	"github.com/trellisflow/trellis/runtime/eval"
)

// The JUnit XML schema's shape (Jenkins' junit-10.xsd, which GitLab,
// GitHub's test reporters and Jenkins read): testsuites holds testsuite
// elements with name, tests, failures, errors, skipped, time; each holds
// testcase elements with name, classname, time and at most one of
// failure, error or skipped (each with a message), and system-out. It is
// read here with its own types, strictly, so that the writer's types do
// not vouch for themselves.
type junitDoc struct {
	XMLName  xml.Name `xml:"testsuites"`
	Tests    *int     `xml:"tests,attr"`
	Failures *int     `xml:"failures,attr"`
	Skipped  *int     `xml:"skipped,attr"`
	Suites   []struct {
		Name      *string  `xml:"name,attr"`
		Tests     *int     `xml:"tests,attr"`
		Failures  *int     `xml:"failures,attr"`
		Errors    *int     `xml:"errors,attr"`
		Skipped   *int     `xml:"skipped,attr"`
		Time      *float64 `xml:"time,attr"`
		Timestamp string   `xml:"timestamp,attr"`
		Props     []struct {
			Name  string `xml:"name,attr"`
			Value string `xml:"value,attr"`
		} `xml:"properties>property"`
		Cases []struct {
			Name      *string  `xml:"name,attr"`
			ClassName *string  `xml:"classname,attr"`
			Time      *float64 `xml:"time,attr"`
			Line      int      `xml:"line,attr"`
			Failure   []struct {
				Message *string `xml:"message,attr"`
				Body    string  `xml:",chardata"`
			} `xml:"failure"`
			Error []struct {
				Message *string `xml:"message,attr"`
			} `xml:"error"`
			Skipped []struct {
				Message *string `xml:"message,attr"`
			} `xml:"skipped"`
			Out string `xml:"system-out"`
		} `xml:"testcase"`
	} `xml:"testsuite"`
}

// The JUnit report parses as JUnit: its counts agree with its test
// cases, a failure says the case's reason, a known failure is a skipped
// test, and a reply's control characters do not break the XML.
func TestJUnitParses(t *testing.T) {
	dir := t.TempDir()
	g := writeFlow(t, dir, "1")
	ds := loadDataset(t, dir, `flow: echo.yaml
cases:
  - name: "passes <&> \"quoted\""
    turns: ["hi \u0007 <b>bold</b> ]]>"]
    expect: {reply: [{contains: "<b>"}]}
  - name: fails
    turns: [hi]
    expect: {state: ["state.turns == 9"]}
  - name: known
    turns: [hi]
    scores: [{name: length, value: state.score, min: 5, xfail: not yet}]
`)
	res, err := eval.Run(context.Background(), ds, []eval.Target{{Label: "echo.yaml", Graph: g}}, eval.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := eval.WriteJUnit(&buf, []*eval.Report{res.Report}); err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(bytes.NewReader(buf.Bytes()))
	dec.Strict = true
	var doc junitDoc
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("the JUnit XML does not parse: %v\n%s", err, buf.String())
	}
	// nothing after the root element but white space
	if tok, err := dec.Token(); err != io.EOF {
		if cd, ok := tok.(xml.CharData); !ok || strings.TrimSpace(string(cd)) != "" {
			t.Fatalf("after the root: %v %v", tok, err)
		}
	}
	if len(doc.Suites) != 1 {
		t.Fatalf("%d suites", len(doc.Suites))
	}
	s := doc.Suites[0]
	if s.Name == nil || s.Tests == nil || s.Failures == nil || s.Errors == nil || s.Skipped == nil || s.Time == nil || s.Timestamp == "" {
		t.Fatalf("a suite attribute the schema requires is missing: %+v", s)
	}
	failures, skipped := 0, 0
	byName := map[string]int{}
	for i, c := range s.Cases {
		if c.Name == nil || c.ClassName == nil || c.Time == nil {
			t.Fatalf("case %d lacks name, classname or time", i)
		}
		if len(c.Failure)+len(c.Error)+len(c.Skipped) > 1 {
			t.Fatalf("case %s has more than one outcome", *c.Name)
		}
		for _, f := range c.Failure {
			if f.Message == nil || *f.Message == "" {
				t.Fatalf("case %s: a failure without its message", *c.Name)
			}
		}
		failures += len(c.Failure)
		skipped += len(c.Skipped)
		byName[*c.Name] = i
	}
	if *s.Tests != len(s.Cases) || *s.Failures != failures || *s.Skipped != skipped || *doc.Tests != len(s.Cases) || *doc.Failures != failures {
		t.Fatalf("counts: tests %d/%d failures %d/%d skipped %d/%d", *s.Tests, len(s.Cases), *s.Failures, failures, *s.Skipped, skipped)
	}
	if failures != 1 || skipped != 1 {
		t.Fatalf("failures %d, skipped %d", failures, skipped)
	}
	pass := s.Cases[byName[`passes <&> "quoted"`]]
	if len(pass.Failure) != 0 || !strings.Contains(pass.Out, "flow: you said hi") || !strings.Contains(pass.Out, "<b>bold</b> ]]>") {
		t.Fatalf("passing case: %+v", pass)
	}
	fail := s.Cases[byName["fails"]]
	if msg := *fail.Failure[0].Message; !strings.Contains(msg, "state.turns == 9 does not hold; state.turns = 2") {
		t.Fatalf("failure message %q", msg)
	}
	if !strings.Contains(fail.Failure[0].Body, "echo.eval.yaml:8:") || fail.Line != 6 {
		t.Fatalf("failure body %q, line %d", fail.Failure[0].Body, fail.Line)
	}
	if msg := *s.Cases[byName["known"]].Skipped[0].Message; !strings.Contains(msg, "known failure (xfail): known failure (not yet): length") {
		t.Fatalf("skipped message %q", msg)
	}
}

// GitHub annotations point at the line of each failing check, and a
// known failure is a notice, not an error.
func TestGitHubAnnotations(t *testing.T) {
	dir := t.TempDir()
	g := writeFlow(t, dir, "1")
	ds := loadDataset(t, dir, `flow: echo.yaml
cases:
  - name: fails, badly
    turns: [hi]
    expect: {state: ["state.turns == 9"]}
  - name: known
    turns: [hi]
    scores: [{name: length, value: state.score, min: 5, xfail: not yet}]
`)
	res, err := eval.Run(context.Background(), ds, []eval.Target{{Label: "echo.yaml", Graph: g}}, eval.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := eval.WriteGitHub(&buf, []*eval.Report{res.Report}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%q", lines)
	}
	if !strings.HasPrefix(lines[0], "::error file="+ds.Path+",line=5,title=eval%3A fails%2C badly::state: state.turns == 9: ") {
		t.Errorf("%s", lines[0])
	}
	if !strings.HasPrefix(lines[1], "::notice file="+ds.Path+",line=8,title=eval%3A known (known failure)::not yet: length: ") {
		t.Errorf("%s", lines[1])
	}
}
