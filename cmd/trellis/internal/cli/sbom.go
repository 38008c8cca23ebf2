package cli

import (
	"context"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"time"
)

// cmdSBOM writes the SPDX 2.3 document (JSON) of an image made of a
// trellis binary and Debian packages' files: the binary's Go modules and
// toolchain as its build information records them (read from the binary,
// as scanners read it), each with its package URL, and each Debian
// package named with --deb at the version dpkg has installed.
func cmdSBOM(_ context.Context, env *Env, args []string) int {
	fs := flags(env, "dev")
	name := fs.String("name", "trellis", "the image's name, as the document names what it describes")
	var debs multi
	fs.Var(&debs, "deb", "a Debian package whose files the image carries (ca-certificates, say): its installed version is recorded (repeatable)")
	pos, code, ok := parse(fs, args)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return fail(env, "dev sbom", usagef("want dev sbom BINARY"))
	}
	doc, err := spdxDocument(pos[0], *name, debs, time.Now().UTC(), debVersion)
	if err != nil {
		return fail(env, "dev sbom", err)
	}
	enc := json.NewEncoder(env.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return fail(env, "dev sbom", err)
	}
	return 0
}

// SPDX 2.3's JSON form, the parts written here.
type (
	spdxDoc struct {
		SPDXVersion       string             `json:"spdxVersion"`
		DataLicense       string             `json:"dataLicense"`
		SPDXID            string             `json:"SPDXID"`
		Name              string             `json:"name"`
		DocumentNamespace string             `json:"documentNamespace"`
		CreationInfo      spdxCreation       `json:"creationInfo"`
		DocumentDescribes []string           `json:"documentDescribes"`
		Packages          []spdxPackage      `json:"packages"`
		Relationships     []spdxRelationship `json:"relationships"`
	}
	spdxCreation struct {
		Created  string   `json:"created"`
		Creators []string `json:"creators"`
	}
	spdxPackage struct {
		SPDXID           string        `json:"SPDXID"`
		Name             string        `json:"name"`
		VersionInfo      string        `json:"versionInfo,omitempty"`
		Supplier         string        `json:"supplier,omitempty"`
		DownloadLocation string        `json:"downloadLocation"`
		FilesAnalyzed    bool          `json:"filesAnalyzed"`
		LicenseConcluded string        `json:"licenseConcluded"`
		LicenseDeclared  string        `json:"licenseDeclared"`
		CopyrightText    string        `json:"copyrightText"`
		PrimaryPurpose   string        `json:"primaryPackagePurpose,omitempty"`
		ExternalRefs     []spdxExtRef  `json:"externalRefs,omitempty"`
		Checksums        []spdxSummary `json:"checksums,omitempty"`
	}
	spdxExtRef struct {
		Category string `json:"referenceCategory"`
		Type     string `json:"referenceType"`
		Locator  string `json:"referenceLocator"`
	}
	spdxSummary struct {
		Algorithm string `json:"algorithm"`
		Value     string `json:"checksumValue"`
	}
	spdxRelationship struct {
		Element string `json:"spdxElementId"`
		Type    string `json:"relationshipType"`
		Related string `json:"relatedSpdxElement"`
	}
)

var spdxIDChars = regexp.MustCompile(`[^A-Za-z0-9.-]+`)

// spdxID is an SPDX identifier for a package (letters, digits, . and -).
func spdxID(kind, name string) string {
	return "SPDXRef-" + kind + "-" + strings.Trim(spdxIDChars.ReplaceAllString(name, "-"), "-")
}

// spdxDocument describes the image name: the binary at path (its build
// information) and the Debian packages debs, versioned by version.
func spdxDocument(path, name string, debs []string, now time.Time, version func(pkg string) (string, error)) (*spdxDoc, error) {
	info, err := buildinfo.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: no Go build information: %w", path, err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(data)
	main := info.Main.Version
	if main == "" || main == "(devel)" {
		main = ""
	}
	image := spdxPackage{SPDXID: spdxID("Image", name), Name: name, VersionInfo: main, DownloadLocation: "NOASSERTION", PrimaryPurpose: "CONTAINER",
		LicenseConcluded: "NOASSERTION", LicenseDeclared: "NOASSERTION", CopyrightText: "NOASSERTION"}
	bin := spdxPackage{SPDXID: spdxID("Application", info.Main.Path), Name: info.Main.Path, VersionInfo: main, DownloadLocation: "NOASSERTION",
		PrimaryPurpose: "APPLICATION", LicenseConcluded: "NOASSERTION", LicenseDeclared: "Apache-2.0", CopyrightText: "NOASSERTION",
		Checksums: []spdxSummary{{Algorithm: "SHA256", Value: hex.EncodeToString(sum[:])}}}
	if main != "" {
		bin.ExternalRefs = []spdxExtRef{{"PACKAGE-MANAGER", "purl", "pkg:golang/" + info.Main.Path + "@" + main}}
	}
	doc := &spdxDoc{SPDXVersion: "SPDX-2.3", DataLicense: "CC0-1.0", SPDXID: "SPDXRef-DOCUMENT", Name: name,
		CreationInfo:      spdxCreation{Created: now.Format(time.RFC3339), Creators: []string{"Tool: trellis-dev-sbom"}},
		DocumentDescribes: []string{image.SPDXID}}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%x\x00%s", name, sum, now.Format(time.RFC3339Nano))
	doc.DocumentNamespace = "https://trellisflow.github.io/spdx/" + spdxIDChars.ReplaceAllString(name, "-") + "-" + hex.EncodeToString(h.Sum(nil))[:16]
	doc.Packages = append(doc.Packages, image, bin)
	rel := func(a, typ, b string) {
		doc.Relationships = append(doc.Relationships, spdxRelationship{a, typ, b})
	}
	rel("SPDXRef-DOCUMENT", "DESCRIBES", image.SPDXID)
	rel(image.SPDXID, "CONTAINS", bin.SPDXID)
	goVersion := strings.TrimPrefix(info.GoVersion, "go")
	stdlib := spdxPackage{SPDXID: spdxID("Go", "stdlib"), Name: "stdlib", VersionInfo: goVersion, DownloadLocation: "https://go.dev/dl/",
		LicenseConcluded: "NOASSERTION", LicenseDeclared: "BSD-3-Clause", CopyrightText: "NOASSERTION", PrimaryPurpose: "LIBRARY",
		ExternalRefs: []spdxExtRef{{"PACKAGE-MANAGER", "purl", "pkg:golang/stdlib@" + info.GoVersion}}}
	doc.Packages = append(doc.Packages, stdlib)
	rel(bin.SPDXID, "DEPENDS_ON", stdlib.SPDXID)
	for _, d := range info.Deps {
		m := d
		if d.Replace != nil {
			m = d.Replace
		}
		p := spdxPackage{SPDXID: spdxID("Go", m.Path+"-"+m.Version), Name: m.Path, VersionInfo: m.Version, DownloadLocation: "NOASSERTION",
			LicenseConcluded: "NOASSERTION", LicenseDeclared: "NOASSERTION", CopyrightText: "NOASSERTION", PrimaryPurpose: "LIBRARY",
			ExternalRefs: []spdxExtRef{{"PACKAGE-MANAGER", "purl", "pkg:golang/" + m.Path + "@" + m.Version}}}
		doc.Packages = append(doc.Packages, p)
		rel(bin.SPDXID, "DEPENDS_ON", p.SPDXID)
	}
	for _, pkg := range debs {
		v, err := version(pkg)
		if err != nil {
			return nil, fmt.Errorf("--deb %s: %w", pkg, err)
		}
		p := spdxPackage{SPDXID: spdxID("Deb", pkg), Name: pkg, VersionInfo: v, Supplier: "Organization: Debian", DownloadLocation: "NOASSERTION",
			LicenseConcluded: "NOASSERTION", LicenseDeclared: "NOASSERTION", CopyrightText: "NOASSERTION",
			ExternalRefs: []spdxExtRef{{"PACKAGE-MANAGER", "purl", "pkg:deb/debian/" + pkg + "@" + v}}}
		doc.Packages = append(doc.Packages, p)
		rel(image.SPDXID, "CONTAINS", p.SPDXID)
	}
	return doc, nil
}

// debVersion is the version dpkg has installed of a Debian package.
func debVersion(pkg string) (string, error) {
	out, err := exec.Command("dpkg-query", "-W", "-f=${Version}", pkg).Output()
	if err != nil || len(out) == 0 {
		return "", fmt.Errorf("dpkg has no package %s installed (%v)", pkg, err)
	}
	return strings.TrimSpace(string(out)), nil
}
