package main

import (
	"fmt"
	"runtime/debug"
	"strings"

	"github.com/rdmarpc/rdmarpc/codegen"
)

// version is what rdmarpc --version prints: the command's module version
// (moduleVersion) and the versions of the two generators gen runs, which
// their files' headers name.
func version() string {
	mod, protobuf := "(devel)", "(unknown)"
	if bi, ok := debug.ReadBuildInfo(); ok {
		mod = moduleVersion(bi)
		for _, d := range bi.Deps {
			if d.Path == "google.golang.org/protobuf" {
				protobuf = d.Version
				if d.Replace != nil {
					protobuf = d.Replace.Version
				}
			}
		}
	}
	return fmt.Sprintf("%s\n%s %s\nprotoc-gen-go %s", mod, codegen.PluginName, codegen.Version, protobuf)
}

// moduleVersion names the build: the module version go install records, or
// the pseudo-version go build derives from the clone's commit (Go 1.24 and
// later). Without either (an older Go records "(devel)" next to the VCS
// stamp; a module used through a replace has the zero pseudo-version), the
// VCS stamp says which commit: "(devel) <revision>[+dirty] <time>". A build
// with no stamp at all says so: -buildvcs=false, a git worktree (which go
// build does not recognise), or a module used through a replace (go tool
// rdmarpc from a clone: only the main module is stamped).
func moduleVersion(bi *debug.BuildInfo) string {
	v := bi.Main.Version
	if v != "" && v != "(devel)" && !strings.HasPrefix(v, "v0.0.0-00010101000000-") {
		return v
	}
	vcs := make(map[string]string)
	for _, s := range bi.Settings {
		vcs[s.Key] = s.Value
	}
	rev := vcs["vcs.revision"]
	if rev == "" {
		return "(devel, no version or VCS stamp)"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if vcs["vcs.modified"] == "true" {
		rev += "+dirty"
	}
	if t := vcs["vcs.time"]; t != "" {
		rev += " " + t
	}
	return "(devel) " + rev
}

func init() {
	rootCmd.Version = version()
	rootCmd.SetVersionTemplate("rdmarpc {{.Version}}\n")
}
