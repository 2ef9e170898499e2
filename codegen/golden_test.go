package codegen_test

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files with what the generators produce now")

// TestGolden regenerates every golden package (and the echo example) as the
// package's go:generate line says, and compares the result with the
// checked-in files.
// The golden packages are part of the build, so `go build ./...` proves the
// generated code compiles and `go vet ./...` checks it.
func TestGolden(t *testing.T) {
	for _, c := range genCases(t) {
		t.Run(filepath.ToSlash(c.dir), func(t *testing.T) {
			files := c.parse(t).generate(t)
			generated := make(map[string]bool)
			for _, f := range files {
				generated[filepath.Clean(f.Path)] = true
				if *update {
					if err := os.WriteFile(f.Path, f.Content, 0o666); err != nil {
						t.Fatal(err)
					}
					continue
				}
				want, err := os.ReadFile(f.Path)
				if err != nil {
					t.Errorf("%v (run go test ./codegen -run TestGolden -update, or make generate)", err)
					continue
				}
				if !bytes.Equal(f.Content, want) {
					t.Errorf("%s differs from what the generators produce now:\n%s\n"+
						"If the change is intended, run go test ./codegen -run TestGolden -update (or make generate) and review the diff.",
						f.Path, lineDiff("checked in", want, "generated", f.Content, nil))
				}
			}
			// A generated file left behind by an earlier version of a
			// .proto would still compile and mislead.
			dirs := make(map[string]bool)
			for _, f := range files {
				dirs[filepath.Dir(f.Path)] = true
			}
			for dir := range dirs {
				entries, err := os.ReadDir(dir)
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range entries {
					p := filepath.Clean(filepath.Join(dir, e.Name()))
					if strings.HasSuffix(e.Name(), ".pb.go") && !generated[p] {
						t.Errorf("%s is not generated any more: delete it", p)
					}
				}
			}
		})
	}
}

// lineDiff shows the first line where a and b differ, ignoring lines that
// same says are equivalent; "" when there is none.
func lineDiff(aName string, a []byte, bName string, b []byte, same func(x, y string) bool) string {
	al := strings.Split(string(a), "\n")
	bl := strings.Split(string(b), "\n")
	for i := 0; i < len(al) || i < len(bl); i++ {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y && (same == nil || !same(x, y)) {
			return fmt.Sprintf("line %d:\n  %-12s %s\n  %-12s %s", i+1, aName+":", x, bName+":", y)
		}
	}
	return ""
}
