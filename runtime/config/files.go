package config

import (
	"errors"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// Files is where a flow and the files it names are read from: the disk,
// or an fs.FS (such as an embed.FS compiled into a program). Names are
// what diagnostics show: operating-system paths on the disk, slash
// separated paths inside an fs.FS.
type Files struct {
	fsys fs.FS // nil: the disk
}

// Disk reads files from the operating system's file system.
func Disk() *Files { return &Files{} }

// FS reads files from fsys.
func FS(fsys fs.FS) *Files { return &Files{fsys: fsys} }

// ReadFile reads the named file.
func (f *Files) ReadFile(name string) ([]byte, error) {
	if f.fsys == nil {
		return os.ReadFile(name)
	}
	return fs.ReadFile(f.fsys, f.clean(name))
}

// Exists reports whether the named file exists and is not a directory.
func (f *Files) Exists(name string) bool {
	var info fs.FileInfo
	var err error
	if f.fsys == nil {
		info, err = os.Stat(name)
	} else {
		info, err = fs.Stat(f.fsys, f.clean(name))
	}
	return err == nil && !info.IsDir()
}

// Join resolves rel against dir; an absolute rel on the disk stands
// alone.
func (f *Files) Join(dir, rel string) string {
	if f.fsys == nil {
		if filepath.IsAbs(rel) {
			return rel
		}
		return filepath.Join(dir, filepath.FromSlash(rel))
	}
	return path.Join(dir, rel)
}

// Dir returns the directory of name.
func (f *Files) Dir(name string) string {
	if f.fsys == nil {
		return filepath.Dir(name)
	}
	return path.Dir(name)
}

// Up returns dir and each directory above it, innermost first: on the
// disk up to the root, in an fs.FS up to its root.
func (f *Files) Up(dir string) []string {
	var out []string
	if f.fsys == nil {
		abs, err := filepath.Abs(dir)
		if err != nil {
			abs = dir
		}
		for {
			out = append(out, abs)
			parent := filepath.Dir(abs)
			if parent == abs {
				return out
			}
			abs = parent
		}
	}
	dir = f.clean(dir)
	for {
		out = append(out, dir)
		if dir == "." {
			return out
		}
		dir = path.Dir(dir)
	}
}

// Display shortens an absolute disk path to one relative to the working
// directory when it lies inside it, as a person would type it.
func (f *Files) Display(name string) string {
	if f.fsys != nil || !filepath.IsAbs(name) {
		return name
	}
	wd, err := os.Getwd()
	if err != nil {
		return name
	}
	if rel, err := filepath.Rel(wd, name); err == nil && !strings.HasPrefix(rel, "..") {
		return rel
	}
	return name
}

// Walk calls fn with every file under root (names as Join would make
// them); a root that does not exist has no files.
func (f *Files) Walk(root string, fn func(name string)) {
	walk := func(p string, e fs.DirEntry, err error) error {
		if err == nil && !e.IsDir() {
			fn(p)
		}
		return nil
	}
	if f.fsys == nil {
		_ = filepath.WalkDir(root, walk)
		return
	}
	_ = fs.WalkDir(f.fsys, f.clean(root), walk)
}

// Rel returns name relative to root (both as Join makes them), with
// slashes.
func (f *Files) Rel(root, name string) string {
	if f.fsys == nil {
		rel, err := filepath.Rel(root, name)
		if err != nil {
			return name
		}
		return filepath.ToSlash(rel)
	}
	rel, ok := strings.CutPrefix(f.clean(name), strings.TrimSuffix(f.clean(root), ".")+"/")
	if !ok || f.clean(root) == "." {
		return f.clean(name)
	}
	return rel
}

// URL is the file URL of a name, as JSON Schema $refs resolve against
// it; URLPath reads a file by the path of such a URL.
func (f *Files) URL(name string) string {
	if f.fsys == nil {
		abs, err := filepath.Abs(name)
		if err != nil {
			abs = name
		}
		return (&url.URL{Scheme: "file", Path: filepath.ToSlash(abs)}).String()
	}
	return (&url.URL{Scheme: "file", Path: "/" + f.clean(name)}).String()
}

// ReadURLPath reads the file named by the path of a URL made by URL.
func (f *Files) ReadURLPath(p string) ([]byte, error) {
	if f.fsys == nil {
		return os.ReadFile(filepath.FromSlash(p))
	}
	return fs.ReadFile(f.fsys, f.clean(p))
}

// URLName is the name of the file ReadURLPath(p) reads.
func (f *Files) URLName(p string) string {
	if f.fsys == nil {
		return filepath.FromSlash(p)
	}
	return f.clean(p)
}

// clean turns a name into a valid fs.FS path.
func (f *Files) clean(name string) string {
	name = path.Clean(filepath.ToSlash(name))
	name = strings.TrimPrefix(name, "/")
	if name == "" {
		return "."
	}
	return name
}

// NotFound reports whether err says that a file does not exist.
func NotFound(err error) bool { return errors.Is(err, fs.ErrNotExist) }
