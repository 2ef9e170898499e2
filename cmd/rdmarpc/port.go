package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
)

// The port rule: gRPC-go's root package and every package under it map to
// rdmarpc's module at the same relative path, the root to grpc/.
const (
	grpcRoot    = "google.golang.org/grpc"
	rdmarpcRoot = "github.com/rdmarpc/rdmarpc"
)

// portPath returns the import path the rule maps path to, and the path
// relative to rdmarpc's module (portAPI's key); ok is false for a path
// that is not gRPC-go's.
func portPath(path string) (mapped, rel string, ok bool) {
	switch {
	case path == grpcRoot:
		return rdmarpcRoot + "/grpc", "grpc", true
	case strings.HasPrefix(path, grpcRoot+"/"):
		rel = strings.TrimPrefix(path, grpcRoot+"/")
		return rdmarpcRoot + "/" + rel, rel, true
	}
	return "", "", false
}

func newPortCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "port [-diff] [PATH...]",
		Short: "Port a gRPC-go program: rewrite its imports, list what rdmarpc lacks",
		Long: `port rewrites the imports of a gRPC-go program by rdmarpc's one rule,

  google.golang.org/grpc   -> github.com/rdmarpc/rdmarpc/grpc
  google.golang.org/grpc/X -> github.com/rdmarpc/rdmarpc/X

in every .go file of the given files and directories (default "."; DIR/...
for DIR and every directory below it, skipping vendor, testdata and hidden
ones), writing them back gofmt'd. With -diff it writes nothing and prints
what it would change, as a diff.

It then lists, as FILE:LINE:COL, every identifier of a gRPC-go package the
program uses that the rdmarpc package at the mapped path does not have (and
every import whose package rdmarpc does not have at all), and exits 1 if
there is any: what is left to port by hand. Run it first.`,
		Example: `  rdmarpc port -diff ./...   # what would change, and what is missing
  rdmarpc port ./...         # rewrite`,
		// gofmt's -d and gofix's -diff take one dash: so does this flag
		// (and two), which pflag cannot parse.
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			fs := flag.NewFlagSet("port", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			diff := fs.Bool("diff", false, "")
			switch err := fs.Parse(args); {
			case errors.Is(err, flag.ErrHelp):
				return cmd.Help()
			case err != nil:
				return &usageError{err}
			}
			args = fs.Args()
			if len(args) == 0 {
				args = []string{"."}
			}
			return runPort(cmd.OutOrStdout(), args, *diff)
		},
	}
	return cmd
}

func init() { rootCmd.AddCommand(newPortCmd()) }

func runPort(w io.Writer, args []string, diff bool) error {
	files, err := goFiles(args)
	if err != nil {
		return &usageError{err}
	}
	missing := 0
	modules := make(map[string]string) // directory -> the path of the module it is in
	for _, name := range files {
		src, err := os.ReadFile(name)
		if err != nil {
			return err
		}
		out, gaps, err := portFile(name, src, modulePath(modules, filepath.Dir(name)))
		if err != nil {
			return fmt.Errorf("port: %w", err)
		}
		for _, g := range gaps {
			fmt.Fprintln(w, g)
		}
		missing += len(gaps)
		if bytes.Equal(out, src) {
			continue
		}
		if diff {
			fmt.Fprint(w, unifiedDiff(name, src, out))
			continue
		}
		if err := os.WriteFile(name, out, 0o666); err != nil {
			return err
		}
	}
	if missing > 0 {
		return fmt.Errorf("port: %d use(s) of gRPC-go that rdmarpc lacks, listed above", missing)
	}
	return nil
}

// goFiles expands the arguments into .go files: a file as it is, a
// directory's files, DIR/... the files of DIR and of every directory below
// it but vendor, testdata and hidden ones.
func goFiles(args []string) ([]string, error) {
	var files []string
	for _, arg := range args {
		dir, recursive := strings.CutSuffix(arg, "/...")
		if recursive && dir == "" {
			dir = "."
		}
		fi, err := os.Stat(dir)
		if err != nil {
			return nil, err
		}
		if !fi.IsDir() {
			files = append(files, dir)
			continue
		}
		err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				base := d.Name()
				if p != dir && (!recursive || base == "vendor" || base == "testdata" || strings.HasPrefix(base, ".") || strings.HasPrefix(base, "_")) {
					return filepath.SkipDir
				}
				return nil
			}
			if strings.HasSuffix(p, ".go") {
				files = append(files, p)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return files, nil
}

// modulePath returns the module path in the go.mod of dir or of the
// nearest directory above it ("" for none), remembering it in cache.
func modulePath(cache map[string]string, dir string) string {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return ""
	}
	if m, ok := cache[dir]; ok {
		return m
	}
	m := ""
	if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "module"); ok {
				m = strings.Trim(strings.TrimSpace(rest), `"`)
				break
			}
		}
	} else if parent := filepath.Dir(dir); parent != dir {
		m = modulePath(cache, parent)
	}
	cache[dir] = m
	return m
}

// portFile returns src with its imports rewritten by the rule and gofmt'd
// (src itself when nothing changes), and what of gRPC-go it uses that
// rdmarpc lacks, one line each. Imports of the file's own module (own,
// when gRPC-go's examples are the program) are left as they are.
func portFile(name string, src []byte, own string) ([]byte, []string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, src, parser.ParseComments)
	if err != nil {
		return nil, nil, err
	}
	var gaps []string
	pkgs := make(map[string]string) // the file's name for each ported package -> its rel path
	changed := false
	for _, imp := range f.Imports {
		path, err := strconv.Unquote(imp.Path.Value)
		if err != nil {
			continue
		}
		mapped, rel, ok := portPath(path)
		if !ok || own != "" && (path == own || strings.HasPrefix(path, own+"/")) {
			continue
		}
		imp.Path.Value = strconv.Quote(mapped)
		changed = true
		if _, known := portAPI[rel]; !known {
			gaps = append(gaps, fmt.Sprintf("%s: %s: rdmarpc has no package %s", fset.Position(imp.Pos()), path, mapped))
			continue
		}
		local := rel[strings.LastIndex(rel, "/")+1:]
		if imp.Name != nil {
			local = imp.Name.Name
		}
		if local != "_" && local != "." {
			pkgs[local] = rel
		}
	}
	if len(pkgs) > 0 {
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			x, ok := sel.X.(*ast.Ident)
			if !ok || x.Obj != nil { // x.Obj: a local name, not the package
				return true
			}
			if rel, ok := pkgs[x.Name]; ok && !slices.Contains(portAPI[rel], sel.Sel.Name) {
				gaps = append(gaps, fmt.Sprintf("%s: %s.%s: not in %s/%s", fset.Position(sel.Pos()), x.Name, sel.Sel.Name, rdmarpcRoot, rel))
			}
			return true
		})
	}
	if !changed {
		return src, gaps, nil
	}
	var buf bytes.Buffer
	if err := format.Node(&buf, fset, f); err != nil {
		return nil, nil, err
	}
	return buf.Bytes(), gaps, nil
}

// unifiedDiff is a diff -u of a and b, enough for a few changed lines: one
// hunk from the first changed line to the last, with three lines around.
func unifiedDiff(name string, a, b []byte) string {
	lines := func(s string) []string {
		l := strings.SplitAfter(s, "\n")
		if l[len(l)-1] == "" {
			l = l[:len(l)-1]
		}
		return l
	}
	al, bl := lines(string(a)), lines(string(b))
	pre := 0
	for pre < len(al) && pre < len(bl) && al[pre] == bl[pre] {
		pre++
	}
	suf := 0
	for suf < len(al)-pre && suf < len(bl)-pre && al[len(al)-1-suf] == bl[len(bl)-1-suf] {
		suf++
	}
	start := max(0, pre-3)
	aEnd := min(len(al), len(al)-suf+3)
	bEnd := min(len(bl), len(bl)-suf+3)
	var sb strings.Builder
	fmt.Fprintf(&sb, "--- %s\n+++ %s\n@@ -%d,%d +%d,%d @@\n", name, name, start+1, aEnd-start, start+1, bEnd-start)
	line := func(prefix, s string) {
		sb.WriteString(prefix + strings.TrimSuffix(s, "\n") + "\n")
	}
	for _, s := range al[start:pre] {
		line(" ", s)
	}
	for _, s := range al[pre : len(al)-suf] {
		line("-", s)
	}
	for _, s := range bl[pre : len(bl)-suf] {
		line("+", s)
	}
	for _, s := range al[len(al)-suf : aEnd] {
		line(" ", s)
	}
	return sb.String()
}
