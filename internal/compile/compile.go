package compile

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/bufbuild/protocompile"
	"github.com/bufbuild/protocompile/linker"
	"github.com/bufbuild/protocompile/options"
	"github.com/bufbuild/protocompile/protoutil"
	"github.com/bufbuild/protocompile/reporter"
	"github.com/bufbuild/protocompile/wellknownimports"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/gofeaturespb"
	"google.golang.org/protobuf/types/pluginpb"
)

// Config says what to compile and where imports are found.
type Config struct {
	// ImportPaths are the directories searched, in order, for imports and
	// for the input files, as protoc's -I. None means ".".
	ImportPaths []string

	// Files are the .proto files to generate code for, as paths on disk
	// inside one of ImportPaths, or as names relative to one of them; with
	// DescriptorSets, as names in the sets.
	Files []string

	// DescriptorSets, as protoc's --descriptor_set_in, are files holding
	// FileDescriptorSets (protoc -o, buf build -o) that the files and their
	// imports are taken from, already compiled, instead of from .proto
	// sources; ImportPaths are then not searched.
	DescriptorSets []string

	// Warn, when set, receives warnings, such as unused imports, formatted
	// as file:line:col: warning: message.
	Warn func(string)
}

// Request compiles cfg.Files and what they import, and returns the request
// protoc would send a plugin for them, without a parameter or a compiler
// version. Errors list every problem found, one file:line:col: message per
// line.
func Request(ctx context.Context, cfg Config) (*pluginpb.CodeGeneratorRequest, error) {
	if len(cfg.DescriptorSets) > 0 {
		return requestFromSets(cfg.DescriptorSets, cfg.Files)
	}
	paths := cfg.ImportPaths
	if len(paths) == 0 {
		paths = []string{"."}
	}
	res := &resolver{paths: paths}
	names := make([]string, 0, len(cfg.Files))
	for _, f := range cfg.Files {
		name, err := res.inputName(f)
		if err != nil {
			return nil, err
		}
		names = append(names, name)
	}
	names = dedup(names)

	var diags []reporter.ErrorWithPos
	var mu sync.Mutex // reporter callbacks may run on several goroutines
	rep := reporter.NewReporter(
		func(err reporter.ErrorWithPos) error {
			mu.Lock()
			defer mu.Unlock()
			diags = append(diags, err)
			return nil // go on, to report every error at once as protoc does
		},
		func(w reporter.ErrorWithPos) {
			if cfg.Warn != nil {
				mu.Lock()
				defer mu.Unlock()
				cfg.Warn(res.format(w, "warning: "))
			}
		})
	c := protocompile.Compiler{
		Resolver:       wellknownimports.WithStandardImports(res),
		SourceInfoMode: protocompile.SourceInfoStandard,
		Reporter:       rep,
	}
	files, err := c.Compile(ctx, names...)
	if len(diags) > 0 {
		// Files compile in parallel; report in a stable order.
		slices.SortStableFunc(diags, func(a, b reporter.ErrorWithPos) int {
			pa, pb := a.GetPosition(), b.GetPosition()
			return cmp.Or(cmp.Compare(pa.Filename, pb.Filename), cmp.Compare(pa.Line, pb.Line), cmp.Compare(pa.Col, pb.Col))
		})
		lines := make([]string, len(diags))
		for i, d := range diags {
			lines[i] = res.format(d, "")
		}
		return nil, errors.New(strings.Join(dedup(lines), "\n"))
	}
	if err != nil {
		var pe reporter.ErrorWithPos
		if errors.As(err, &pe) {
			return nil, errors.New(res.format(pe, ""))
		}
		return nil, fmt.Errorf("compiling %s: %w", strings.Join(names, " "), err)
	}
	return buildRequest(names, files)
}

// buildRequest lists the files as protoc does: each file to generate after
// its imports, depth first in import order, each file once.
func buildRequest(names []string, files linker.Files) (*pluginpb.CodeGeneratorRequest, error) {
	req := &pluginpb.CodeGeneratorRequest{FileToGenerate: names}
	seen := make(map[string]bool)
	var add func(fd protoreflect.FileDescriptor) error
	add = func(fd protoreflect.FileDescriptor) error {
		if seen[fd.Path()] {
			return nil
		}
		seen[fd.Path()] = true
		imps := fd.Imports()
		for i := range imps.Len() {
			if err := add(imps.Get(i).FileDescriptor); err != nil {
				return err
			}
		}
		full := protocPaths(protoutil.ProtoFromFileDescriptor(fd))
		// Plugins get options kept only in source in their own field, as
		// with protoc 22 and later.
		stripped, err := options.StripSourceRetentionOptionsFromFile(full)
		if err != nil {
			return fmt.Errorf("%s: %w", fd.Path(), err)
		}
		req.ProtoFile = append(req.ProtoFile, stripped)
		return nil
	}
	bySource := make(map[string]*descriptorpb.FileDescriptorProto)
	for _, f := range files {
		if err := add(f); err != nil {
			return nil, err
		}
		bySource[f.Path()] = protocPaths(protoutil.ProtoFromFileDescriptor(f))
	}
	for _, name := range names {
		req.SourceFileDescriptors = append(req.SourceFileDescriptors, bySource[name])
	}
	return req, nil
}

// protocPaths returns fd with its source info as protoc records it. protoc
// records the location of an editions file's `edition = "2023";` statement,
// and the comments before it (a license header), under the syntax field's
// path ([12]), as descriptor.proto says; protocompile v0.14 records it under
// the edition field's ([14]). protoc-gen-go and protoc-gen-go-rdmarpc copy
// the file's leading comments from [12], so without this an editions file's
// header would be dropped by rdmarpc gen and kept by protoc. fd is not
// changed (it may be the compiler's own); a changed copy is returned.
func protocPaths(fd *descriptorpb.FileDescriptorProto) *descriptorpb.FileDescriptorProto {
	const syntaxField, editionField = 12, 14
	locs := fd.GetSourceCodeInfo().GetLocation()
	i := slices.IndexFunc(locs, func(l *descriptorpb.SourceCodeInfo_Location) bool {
		return len(l.Path) == 1 && l.Path[0] == editionField
	})
	if i < 0 || slices.ContainsFunc(locs, func(l *descriptorpb.SourceCodeInfo_Location) bool {
		return len(l.Path) == 1 && l.Path[0] == syntaxField
	}) {
		return fd
	}
	fd = proto.CloneOf(fd)
	fd.SourceCodeInfo.Location[i].Path = []int32{syntaxField}
	return fd
}

// builtinDescs are built-in imports taken as the descriptors compiled into
// the protobuf module rather than from protocompile's well-known imports:
// go_features.proto, which those lack (the same descriptor protoc-gen-go
// reads Go features from), and descriptor.proto, which it imports and which
// must then be the same file for every importer.
var builtinDescs = map[string]protoreflect.FileDescriptor{
	gofeaturespb.File_google_protobuf_go_features_proto.Path(): gofeaturespb.File_google_protobuf_go_features_proto,
	descriptorpb.File_google_protobuf_descriptor_proto.Path():  descriptorpb.File_google_protobuf_descriptor_proto,
}

// resolver finds files in the import paths and remembers where on disk it
// found each, so that diagnostics can name disk paths.
type resolver struct {
	paths []string
	disk  sync.Map // name in the import paths -> path on disk
}

// notFoundError is an import, or input, found in none of the import paths.
type notFoundError struct {
	name  string
	paths []string
}

func (e *notFoundError) Error() string {
	return fmt.Sprintf("%q not found in the import paths (-I) %s or among the built-in google/protobuf/*.proto; "+
		"add -I with the directory that %q is relative to",
		e.name, strings.Join(quoteAll(e.paths), ", "), e.name)
}

func (r *resolver) FindFileByPath(name string) (protocompile.SearchResult, error) {
	for _, dir := range r.paths {
		disk := filepath.Join(dir, filepath.FromSlash(name))
		b, err := os.ReadFile(disk)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return protocompile.SearchResult{}, err
		}
		r.disk.Store(name, disk)
		return protocompile.SearchResult{Source: strings.NewReader(string(b))}, nil
	}
	if d, ok := builtinDescs[name]; ok {
		return protocompile.SearchResult{Desc: d}, nil
	}
	return protocompile.SearchResult{}, &notFoundError{name: name, paths: r.paths}
}

// inputName returns the name of an input file relative to the import path
// that holds it, as protoc does. A path that exists on disk must lie inside
// an import path; one that does not is taken as a name within them.
func (r *resolver) inputName(file string) (string, error) {
	if _, err := os.Stat(file); err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		name := filepath.ToSlash(filepath.Clean(file))
		if filepath.IsAbs(file) || strings.HasPrefix(name, "../") {
			return "", fmt.Errorf("%s: no such file", file)
		}
		if _, err := r.FindFileByPath(name); err != nil {
			return "", fmt.Errorf("%s: no such file, and not found in the import paths (-I) %s",
				file, strings.Join(quoteAll(r.paths), ", "))
		}
		return name, nil
	}
	abs, err := filepath.Abs(file)
	if err != nil {
		return "", err
	}
	for _, dir := range r.paths {
		absDir, err := filepath.Abs(dir)
		if err != nil {
			return "", err
		}
		rel, err := filepath.Rel(absDir, abs)
		if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			continue
		}
		name := filepath.ToSlash(rel)
		// An earlier import path may hold another file of that name,
		// which imports would then get instead.
		for _, other := range r.paths {
			disk := filepath.Join(other, rel)
			if _, err := os.Stat(disk); err == nil {
				if same, _ := sameFile(disk, file); !same {
					return "", fmt.Errorf("%s: shadowed by %s, which is found first in the import paths as %s; "+
						"reorder -I or rename a file", file, disk, name)
				}
				break
			}
		}
		return name, nil
	}
	return "", fmt.Errorf("%s: not inside any import path (-I) %s; add -I with the directory its imports are relative to (-I %s if it has none)",
		file, strings.Join(quoteAll(r.paths), ", "), filepath.Dir(file))
}

func sameFile(a, b string) (bool, error) {
	sa, err := os.Stat(a)
	if err != nil {
		return false, err
	}
	sb, err := os.Stat(b)
	if err != nil {
		return false, err
	}
	return os.SameFile(sa, sb), nil
}

// format writes a diagnostic as file:line:col: kind message, naming the file
// by its path on disk when it came from there.
func (r *resolver) format(err reporter.ErrorWithPos, kind string) string {
	pos := err.GetPosition()
	file := pos.Filename
	if disk, ok := r.disk.Load(file); ok {
		file = disk.(string)
	}
	msg := kind + err.Unwrap().Error()
	var nf *notFoundError
	if errors.As(err, &nf) {
		msg = kind + "import " + nf.Error()
	}
	if strings.Contains(msg, "edition value") && strings.Contains(msg, "not recognized") {
		msg += "; rdmarpc gen's compiler (protocompile) stops at edition 2023: " +
			"generate newer editions with protoc 30 or later and protoc-gen-go-rdmarpc, which takes them, " +
			"or from their descriptors (protoc -o or buf build -o) with rdmarpc gen --descriptor_set_in"
	}
	if pos.Line == 0 {
		return file + ": " + msg
	}
	return fmt.Sprintf("%s:%d:%d: %s", file, pos.Line, pos.Col, msg)
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = fmt.Sprintf("%q", s)
	}
	return out
}

// dedup drops repeated strings, keeping the first of each.
func dedup(ss []string) []string {
	seen := make(map[string]bool, len(ss))
	out := ss[:0:0]
	for _, s := range ss {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}
