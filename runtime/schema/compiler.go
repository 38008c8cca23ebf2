// Compiling JSON Schemas, once per process for a url and its text, and
// reading schema files.

package schema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v5"
	"github.com/trellisflow/trellis/runtime/value"
	"gopkg.in/yaml.v3"
)

// Compiler compiles raw schemas. Relative $refs resolve against the file a
// schema came from; YAML and JSON schema files are both accepted. What it
// compiles is kept, by content, for the process: the same schema (a
// reply schema several prompts name, the state of a flow also run as a
// subflow) is compiled, and checked against the draft's metaschema, once.
type Compiler struct {
	c    *jsonschema.Compiler
	read Reader
	// deps are the files the compilation read for $refs, with their text;
	// trust is set when they were seen valid with the schema compiled.
	deps  []dep
	trust bool
}

// dep is a file a compiled schema refers to, as it was read.
type dep struct {
	path string
	text []byte
}

// Reader reads the file a file:// URL names, given the URL's path: the
// disk, or a file system a flow was loaded from.
type Reader func(path string) ([]byte, error)

// NewCompiler returns a compiler defaulting to draft 2020-12 that reads
// referenced files with read (nil: from the disk).
func NewCompiler(read Reader) *Compiler {
	if read == nil {
		read = diskReader
	}
	sc := &Compiler{read: read}
	c := jsonschema.NewCompiler()
	c.Draft = jsonschema.Draft2020
	c.ExtractAnnotations = false
	c.LoadURL = func(s string) (io.ReadCloser, error) {
		u, err := url.Parse(s)
		if err != nil || u.Scheme != "file" {
			return nil, fmt.Errorf("schema %s: only local files can be referenced", s)
		}
		b, err := read(u.Path)
		if err != nil {
			return nil, err
		}
		sc.deps = append(sc.deps, dep{u.Path, b})
		raw, err := Parse(u.Path, b)
		if err != nil {
			return nil, err
		}
		if m, ok := raw.(map[string]any); ok && sc.trust && m["$schema"] == draft2020 {
			delete(m, "$schema") // seen valid with the schema that refers to it
		}
		if b, err = json.Marshal(raw); err != nil {
			return nil, err
		}
		return io.NopCloser(bytes.NewReader(b)), nil
	}
	sc.c = c
	return sc
}

// compiled is a schema compiled once for the process.
type compiled struct {
	once   sync.Once
	schema *jsonschema.Schema
	err    error
	deps   []dep
}

// maxCompiled bounds the schemas kept (a server reloading edited flows
// compiles new ones); past it the cache starts afresh.
const maxCompiled = 512

var (
	compiledMu sync.Mutex
	compiledBy = map[string]*compiled{}
)

// Compile adds raw under url and compiles it, or returns the schema
// compiled before from the same url and text, when the files it refers
// to still read the same.
func (c *Compiler) Compile(url string, raw any) (*jsonschema.Schema, error) {
	b, err := json.Marshal(raw)
	if err != nil {
		return nil, err
	}
	key := url + "\x00" + string(b)
	for {
		compiledMu.Lock()
		e, ok := compiledBy[key]
		if !ok {
			if len(compiledBy) >= maxCompiled {
				compiledBy = map[string]*compiled{}
			}
			e = &compiled{}
			compiledBy[key] = e
		}
		compiledMu.Unlock()
		e.once.Do(func() {
			if c.seenValid(key) {
				if s, deps, err := c.compileTrusted(url, b); err == nil {
					e.schema, e.deps = s, deps
					return
				}
				// a note that does not hold: check it in full
				c = NewCompiler(c.read)
			}
			if err := c.c.AddResource(url, bytes.NewReader(b)); err != nil {
				e.err = err
				return
			}
			e.schema, e.err = c.c.Compile(url)
			e.deps = c.deps
			if e.err == nil {
				rememberValid(key, c.deps)
			}
		})
		if c.current(e.deps) {
			return e.schema, e.err
		}
		// a file it refers to changed: compile it again, afresh
		compiledMu.Lock()
		if compiledBy[key] == e {
			delete(compiledBy, key)
		}
		compiledMu.Unlock()
		c = NewCompiler(c.read)
	}
}

// compileTrusted compiles a schema seen valid without its metaschema
// check; a schema that fails so (a note that does not hold) is an error,
// even a panic of the library's.
func (c *Compiler) compileTrusted(url string, b []byte) (s *jsonschema.Schema, deps []dep, err error) {
	defer func() {
		if p := recover(); p != nil {
			s, err = nil, fmt.Errorf("schema %s: %v", url, p)
		}
	}()
	c.c.Draft, c.trust = trusted, true
	if err := c.c.AddResource(url, bytes.NewReader(withoutDraft(b))); err != nil {
		return nil, nil, err
	}
	if s, err = c.c.Compile(url); err != nil {
		return nil, nil, err
	}
	trustedCompiles.Add(1)
	return s, c.deps, nil
}

// current reports whether the files deps were read from read the same.
func (c *Compiler) current(deps []dep) bool {
	for _, d := range deps {
		b, err := c.read(d.path)
		if err != nil || !bytes.Equal(b, d.text) {
			return false
		}
	}
	return true
}

func diskReader(path string) ([]byte, error) { return os.ReadFile(filepath.FromSlash(path)) }

// FileURL names a schema resource for a path on disk.
func FileURL(path string) string {
	abs, err := filepath.Abs(path)
	if err != nil {
		abs = path
	}
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(abs)}).String()
}

// ReadFile reads a JSON or YAML file from the disk into state values.
func ReadFile(path string) (any, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, b)
}

// Parse reads JSON or YAML text into state values; name is for errors.
func Parse(name string, b []byte) (any, error) {
	var n yaml.Node
	if err := yaml.Unmarshal(b, &n); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if n.Kind == 0 {
		return nil, fmt.Errorf("%s: the file is empty: it holds no YAML or JSON value", name)
	}
	v, err := value.FromYAML(&n)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return v, nil
}
