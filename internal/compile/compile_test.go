package compile

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/types/descriptorpb"
)

// TestEditionHeaderAtSyntaxPath: the comments before an editions file's
// `edition` statement (a license header) are in the request's source info
// under the syntax field's path, where protoc records them and where
// protoc-gen-go and protoc-gen-go-rdmarpc read a file's leading comments; a
// proto3 file's stay there too.
func TestEditionHeaderAtSyntaxPath(t *testing.T) {
	const header = " Copyright 2026 The rdmarpc Authors.\n\n Licensed under the Apache License, Version 2.0.\n"
	for _, c := range []struct{ name, statement string }{
		{"editions.proto", `edition = "2023";`},
		{"proto3.proto", `syntax = "proto3";`},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			src := "// Copyright 2026 The rdmarpc Authors.\n//\n// Licensed under the Apache License, Version 2.0.\n\n" +
				"// The file's own comment.\n" + c.statement + "\n\npackage p;\n\noption go_package = \"example.com/p\";\n\nmessage M {}\n"
			if err := os.WriteFile(filepath.Join(dir, c.name), []byte(src), 0o666); err != nil {
				t.Fatal(err)
			}
			req, err := Request(context.Background(), Config{ImportPaths: []string{dir}, Files: []string{c.name}})
			if err != nil {
				t.Fatal(err)
			}
			for _, fd := range []*descriptorpb.FileDescriptorProto{req.ProtoFile[len(req.ProtoFile)-1], req.SourceFileDescriptors[0]} {
				var at12 *descriptorpb.SourceCodeInfo_Location
				for _, l := range fd.GetSourceCodeInfo().GetLocation() {
					if len(l.Path) == 1 && l.Path[0] == 14 {
						t.Errorf("%s: a location at the edition field's path [14]; protoc records the statement at [12]", c.name)
					}
					if len(l.Path) == 1 && l.Path[0] == 12 {
						at12 = l
					}
				}
				if at12 == nil {
					t.Fatalf("%s: no location at the syntax field's path [12]", c.name)
				}
				if d := at12.GetLeadingDetachedComments(); len(d) != 1 || d[0] != header {
					t.Errorf("%s: detached comments at [12] = %q, want [%q]", c.name, d, header)
				}
				if got, want := at12.GetLeadingComments(), " The file's own comment.\n"; got != want {
					t.Errorf("%s: leading comment at [12] = %q, want %q", c.name, got, want)
				}
			}
		})
	}
}
