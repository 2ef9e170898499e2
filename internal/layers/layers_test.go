package layers

import (
	"fmt"
	"go/build"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/rdmarpc/rdmarpc"

// layerOf maps a package path inside the module (a prefix ending in "/" covers a
// subtree; the longest match wins) to its layer.
var layerOf = map[string]int{
	"codes": 0, "attributes": 0, "backoff": 0, "connectivity": 0, "keepalive": 0,
	"internal/": 0, "grpclog": 0, "experimental/stats": 0, "test/bufconn": 0, "testbed/selftest": 0, "codegen": 0, "codegen/": 0,
	"transport/rdma/internal/verbs": 0, "transport/rdma/internal/credit": 0,
	"resolver/dns/dnstest": 0, "rpc/internal/timers": 0,

	"status": 1, "metadata": 1, "credentials": 1, "credentials/": 1, "peer": 1, "security/": 1,
	"encoding": 1, "encoding/": 1, "serviceconfig": 1,

	"transport": 2, "transport/internal/": 2, "stats": 2, "resolver": 2,
	"test/conformance": 2, "balancer": 2, "channelz": 2,

	"transport/": 3, "resolver/": 3, "balancer/": 3,

	"rpc": 4, "rpc/internal/": 4,

	"health": 5, "health/": 5, "channelz/": 5, "authz": 5, "reflection": 5, "reflection/": 5,
	"interop/grpc_testing": 5, "rpc/rpctest/testpb": 5, "codegen/internal/golden/": 5,

	"cmd/": 6, "interop": 6, "interop/": 6, "rpc/rpctest": 6, "grpc": 6,
	"transport/transporttest": 6,
	"internal/layers":         6,
}

func layer(pkg string) (int, bool) {
	best, n, ok := -1, 0, false
	for p, l := range layerOf {
		match := pkg == p || (strings.HasSuffix(p, "/") && strings.HasPrefix(pkg, p))
		if match && len(p) > n {
			best, n, ok = l, len(p), true
		}
	}
	return best, ok
}

// packages lists the module's packages (directories with non-test Go files for this
// platform), skipping nested modules, testdata and hidden directories.
func packages(t *testing.T, root string) map[string][]string {
	t.Helper()
	pkgs := map[string][]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if path != root && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
			return filepath.SkipDir
		}
		if path != root {
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir // examples, bench, contrib/*: modules of their own
			}
		}
		bp, err := build.ImportDir(path, 0)
		if err != nil {
			if _, ok := err.(*build.NoGoError); ok {
				return nil
			}
			t.Fatalf("%s: %v", path, err)
		}
		rel, _ := filepath.Rel(root, path)
		pkgs[filepath.ToSlash(rel)] = bp.Imports
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pkgs
}

func TestNoImportFromALayerAbove(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	pkgs := packages(t, root)
	if len(pkgs) < 30 {
		t.Fatalf("found %d packages under %s: the walk is wrong", len(pkgs), root)
	}
	var bad []string
	for pkg, imports := range pkgs {
		lp, ok := layer(pkg)
		if !ok {
			bad = append(bad, pkg+": no layer (add it to layerOf and to doc.go's list)")
			continue
		}
		for _, imp := range imports {
			rel, ok := strings.CutPrefix(imp, module+"/")
			if !ok {
				continue
			}
			li, ok := layer(rel)
			if !ok {
				continue // reported as a package of its own
			}
			if li > lp {
				bad = append(bad, fmt.Sprintf("%s (layer %d) imports %s (layer %d)", pkg, lp, rel, li))
			}
		}
	}
	sort.Strings(bad)
	for _, b := range bad {
		t.Error(b)
	}
}

// TestTheTestCanFail: an upward import and an unplaced package are caught.
func TestTheTestCanFail(t *testing.T) {
	lr, _ := layer("rpc")
	lt, _ := layer("transport/tcp")
	if lt >= lr {
		t.Fatalf("transport/tcp at %d is not below rpc at %d", lt, lr)
	}
	if _, ok := layer("nowhere"); ok {
		t.Fatal("an unknown package has a layer")
	}
	if l, _ := layer("transport/rdma/internal/verbs"); l != 0 {
		t.Fatalf("the longest prefix does not win: verbs at %d", l)
	}
}
