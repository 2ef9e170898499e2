package compile

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/pluginpb"
)

// requestFromSets builds the request for files from the FileDescriptorSets
// in the files sets, as protoc --descriptor_set_in does: a file found in
// several sets is taken from the first, and every file to generate and
// every import must be in one of them.
func requestFromSets(sets, files []string) (*pluginpb.CodeGeneratorRequest, error) {
	byName := make(map[string]*descriptorpb.FileDescriptorProto)
	for _, name := range sets {
		b, err := os.ReadFile(name)
		if err != nil {
			return nil, err
		}
		var set descriptorpb.FileDescriptorSet
		if err := proto.Unmarshal(b, &set); err != nil {
			return nil, fmt.Errorf("%s: not a FileDescriptorSet: %w", name, err)
		}
		for _, f := range set.File {
			if _, dup := byName[f.GetName()]; !dup {
				byName[f.GetName()] = f
			}
		}
	}
	names := make([]string, 0, len(files))
	for _, f := range files {
		names = append(names, path.Clean(strings.ReplaceAll(f, `\`, "/")))
	}
	names = dedup(names)
	req := &pluginpb.CodeGeneratorRequest{FileToGenerate: names}
	// Imports first, depth first in import order, each file once, as
	// protoc lists them; visiting marks files on the current path, to
	// refuse an import cycle rather than recurse forever.
	const visiting, done = 1, 2
	state := make(map[string]int)
	var missing []error
	var add func(name, importer string) error
	add = func(name, importer string) error {
		switch state[name] {
		case done:
			return nil
		case visiting:
			return fmt.Errorf("%s: import cycle through %s", importer, name)
		}
		f, ok := byName[name]
		if !ok {
			if importer == "" {
				missing = append(missing, fmt.Errorf("%s: not in the descriptor sets (--descriptor_set_in) %s", name, strings.Join(quoteAll(sets), ", ")))
			} else {
				missing = append(missing, fmt.Errorf("%s: import %q is not in the descriptor sets (--descriptor_set_in) %s; "+
					"build them with --include_imports", importer, name, strings.Join(quoteAll(sets), ", ")))
			}
			state[name] = done
			return nil
		}
		state[name] = visiting
		for _, dep := range f.GetDependency() {
			if err := add(dep, name); err != nil {
				return err
			}
		}
		state[name] = done
		req.ProtoFile = append(req.ProtoFile, f)
		return nil
	}
	for _, name := range names {
		if err := add(name, ""); err != nil {
			return nil, err
		}
	}
	if len(missing) > 0 {
		return nil, errors.Join(missing...)
	}
	for _, name := range names {
		req.SourceFileDescriptors = append(req.SourceFileDescriptors, byName[name])
	}
	return req, nil
}
