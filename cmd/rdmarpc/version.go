package main

import (
	"fmt"
	"runtime/debug"

	"github.com/rdmarpc/rdmarpc/codegen"
)

// version is what rdmarpc --version prints: the command's module version
// (as go install records it; "(devel)" in a checkout) and the versions of
// the two generators gen runs, which their files' headers name.
func version() string {
	mod, protobuf := "(devel)", "(unknown)"
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v := bi.Main.Version; v != "" {
			mod = v
		}
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

func init() {
	rootCmd.Version = version()
	rootCmd.SetVersionTemplate("rdmarpc {{.Version}}\n")
}
