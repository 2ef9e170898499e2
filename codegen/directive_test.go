package codegen_test

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rdmarpc/rdmarpc/internal/compile"
)

// genDirective prefixes the go:generate lines of checked-in generated code.
const genDirective = "//go:generate go run github.com/rdmarpc/rdmarpc/cmd/rdmarpc gen "

// genCase is one go:generate line of a package with generated code: the
// tests regenerate exactly what make generate does.
type genCase struct {
	dir  string   // the package directory, where go generate runs the line
	args []string // the arguments of rdmarpc gen
}

// genCases returns the go:generate lines of the golden packages, of the
// echo example, and of the health, reflection and channelz protocols'
// packages.
func genCases(t *testing.T) []genCase {
	t.Helper()
	dirs := []string{
		filepath.Join("..", "examples", "echo", "echopb"),
		filepath.Join("..", "health", "grpc_health_v1"),
		filepath.Join("..", "reflection", "grpc_reflection_v1"),
		filepath.Join("..", "channelz", "grpc_channelz_v1"),
	}
	err := filepath.WalkDir(filepath.Join("internal", "golden"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() == "doc.go" {
			dirs = append(dirs, filepath.Dir(p))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var cases []genCase
	for _, dir := range dirs {
		f, err := os.Open(filepath.Join(dir, "doc.go"))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), genDirective); ok {
				cases = append(cases, genCase{dir: dir, args: strings.Fields(rest)})
			}
		}
		f.Close()
	}
	if len(cases) < 6 {
		t.Fatalf("found %d go:generate lines, want one per golden package and the echo example", len(cases))
	}
	return cases
}

// genArgs is what a go:generate line asks rdmarpc gen for.
type genArgs struct {
	importPaths []string
	descSets    []string // --descriptor_set_in
	files       []string
	outs        map[string]*compile.Output // by plugin name
}

// parse reads the subset of rdmarpc gen's flags the go:generate lines use,
// with paths made relative to the test's directory.
func (c genCase) parse(t *testing.T) genArgs {
	t.Helper()
	a := genArgs{outs: make(map[string]*compile.Output)}
	var out string
	var opts []string
	output := func(p compile.Plugin) *compile.Output {
		if a.outs[p.Name] == nil {
			a.outs[p.Name] = &compile.Output{Plugin: p}
		}
		return a.outs[p.Name]
	}
	for i := 0; i < len(c.args); i++ {
		arg := c.args[i]
		name, val, hasVal := strings.Cut(arg, "=")
		if strings.HasPrefix(arg, "-") && !hasVal {
			i++
			val = c.args[i]
		}
		switch name {
		case "-I", "--proto_path":
			a.importPaths = append(a.importPaths, filepath.Join(c.dir, val))
		case "--out":
			out = filepath.Join(c.dir, val)
		case "--opt":
			opts = append(opts, val)
		case "--go_out":
			output(compile.Go).Dir = filepath.Join(c.dir, val)
		case "--go_opt":
			output(compile.Go).Params = append(output(compile.Go).Params, val)
		case "--go-rdmarpc_out":
			output(compile.Rdmarpc).Dir = filepath.Join(c.dir, val)
		case "--go-rdmarpc_opt":
			output(compile.Rdmarpc).Params = append(output(compile.Rdmarpc).Params, val)
		default:
			if strings.HasPrefix(arg, "-") {
				t.Fatalf("%s: go:generate flag %s unknown to the test's parser", c.dir, arg)
			}
			a.files = append(a.files, filepath.Join(c.dir, arg))
		}
	}
	if len(a.importPaths) == 0 {
		a.importPaths = []string{c.dir} // rdmarpc gen's default, "."
	}
	for _, p := range []compile.Plugin{compile.Go, compile.Rdmarpc} {
		o := output(p)
		if o.Dir == "" {
			o.Dir = out
		}
		var common []string
		for _, opt := range opts {
			if p.Takes(opt) { // as rdmarpc gen routes --opt
				common = append(common, opt)
			}
		}
		o.Params = append(common, o.Params...)
	}
	return a
}

// generate runs rdmarpc gen's pipeline in process.
func (a genArgs) generate(t *testing.T) []compile.File {
	t.Helper()
	req, err := compile.Request(t.Context(), compile.Config{ImportPaths: a.importPaths, DescriptorSets: a.descSets, Files: a.files})
	if err != nil {
		t.Fatal(err)
	}
	files, err := compile.Generate(req, []compile.Output{*a.outs["go"], *a.outs["go-rdmarpc"]})
	if err != nil {
		t.Fatal(err)
	}
	return files
}
