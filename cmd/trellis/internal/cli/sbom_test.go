package cli

import (
	"debug/buildinfo"
	"os"
	"regexp"
	"testing"
	"time"
)

// The SBOM of a binary (this test's) holds every Go module its build
// information records, with its package URL, the toolchain, the Debian
// packages named, and relationships between elements it declares, with
// SPDX 2.3's required fields and identifiers.
func TestSPDXDocument(t *testing.T) {
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := spdxDocument(bin, "trellis-test", []string{"ca-certificates"}, time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC),
		func(pkg string) (string, error) { return "20230311", nil })
	if err != nil {
		t.Fatal(err)
	}
	if doc.SPDXVersion != "SPDX-2.3" || doc.DataLicense != "CC0-1.0" || doc.SPDXID != "SPDXRef-DOCUMENT" || doc.Name == "" ||
		!regexp.MustCompile(`^https://[^\s#]+$`).MatchString(doc.DocumentNamespace) || doc.CreationInfo.Created != "2026-11-30T00:00:00Z" || len(doc.CreationInfo.Creators) == 0 {
		t.Fatalf("the document's header: %+v", doc)
	}
	ids := map[string]bool{"SPDXRef-DOCUMENT": true}
	purls := map[string]bool{}
	idFormat := regexp.MustCompile(`^SPDXRef-[A-Za-z0-9.-]+$`)
	for _, p := range doc.Packages {
		if !idFormat.MatchString(p.SPDXID) || ids[p.SPDXID] || p.Name == "" || p.DownloadLocation == "" || p.CopyrightText == "" {
			t.Fatalf("package %+v: a bad or repeated identifier, or a required field empty", p)
		}
		ids[p.SPDXID] = true
		for _, r := range p.ExternalRefs {
			purls[r.Locator] = true
		}
	}
	for _, d := range info.Deps {
		m := d
		if d.Replace != nil {
			m = d.Replace
		}
		if !purls["pkg:golang/"+m.Path+"@"+m.Version] {
			t.Errorf("module %s %s is not in the SBOM", m.Path, m.Version)
		}
	}
	for _, want := range []string{"pkg:golang/stdlib@" + info.GoVersion, "pkg:deb/debian/ca-certificates@20230311"} {
		if !purls[want] {
			t.Errorf("%s is not in the SBOM", want)
		}
	}
	if len(doc.DocumentDescribes) != 1 || !ids[doc.DocumentDescribes[0]] {
		t.Errorf("the document describes %v", doc.DocumentDescribes)
	}
	for _, r := range doc.Relationships {
		if !ids[r.Element] || !ids[r.Related] || r.Type == "" {
			t.Errorf("a relationship between elements the document does not declare: %+v", r)
		}
	}
	if len(doc.Relationships) != len(doc.Packages) {
		t.Errorf("%d relationships for %d packages: every package is reached from the document", len(doc.Relationships), len(doc.Packages))
	}
}
