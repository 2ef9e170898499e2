package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/internal/dynamic"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/status"
)

// maxReflectedFiles bounds the files one command takes from a server's
// reflection service: a server that keeps sending new ones is refused, not
// held in memory without end.
const maxReflectedFiles = 10000

// reflectionSource is a dynamic.Source that asks a server's reflection
// service (grpc.reflection.v1) over one stream, kept for the command's
// life, and keeps the files it is sent. Not safe for concurrent use: the
// commands ask it one question at a time.
type reflectionSource struct {
	stream *reflectionStream
	cancel context.CancelFunc

	protos map[string]*descriptorpb.FileDescriptorProto // every file received, by name
	wanted map[string]bool                              // imports of protos not in protos
	files  *protoregistry.Files                         // built from protos
	types  *dynamicpb.Types                             // over files
}

// newReflectionSource opens a reflection stream on cc; close ends it.
func newReflectionSource(ctx context.Context, cc *rpc.ClientConn) (*reflectionSource, error) {
	ctx, cancel := context.WithCancel(ctx)
	stream, err := openReflection(ctx, cc)
	if err != nil {
		cancel()
		return nil, reflectionFailed(err)
	}
	return newSourceOver(stream, cancel), nil
}

func newSourceOver(stream *reflectionStream, cancel context.CancelFunc) *reflectionSource {
	files := new(protoregistry.Files)
	return &reflectionSource{stream: stream, cancel: cancel, protos: make(map[string]*descriptorpb.FileDescriptorProto), wanted: make(map[string]bool), files: files, types: dynamicpb.NewTypes(files)}
}

func (r *reflectionSource) close() {
	r.stream.s.CloseSend()
	r.cancel()
}

// reflectionFailed words a failed reflection stream: most often a server
// that does not serve reflection.
func reflectionFailed(err error) error {
	if status.Code(err) == codes.Unimplemented {
		return fmt.Errorf("the server does not serve reflection (grpc.reflection.v1.ServerReflection: %v); give the services' .proto files with --proto (and -I)", status.Convert(err).Message())
	}
	return &statusErr{err}
}

// ask sends one request (its kind, the oneof field's name, and its string)
// and returns its answer.
func (r *reflectionSource) ask(kind protoreflect.Name, value string) (*reflectionAnswer, error) {
	a, err := r.stream.ask(kind, value)
	if err != nil {
		return nil, reflectionFailed(err)
	}
	return a, nil
}

// ListServices asks the server for its services.
func (r *reflectionSource) ListServices(context.Context) ([]string, error) {
	a, err := r.ask("list_services", "")
	if err != nil {
		return nil, err
	}
	if a.failed {
		return nil, fmt.Errorf("reflection: listing services: %s: %s", a.code, a.message)
	}
	if !a.listed {
		return nil, errors.New("reflection: listing services: the server answered with no list")
	}
	slices.Sort(a.services)
	return a.services, nil
}

// FindSymbol finds name among the files received, and else asks the
// server for the file that declares it (and, when the server left any out,
// for the files that one imports).
func (r *reflectionSource) FindSymbol(_ context.Context, name string) (protoreflect.Descriptor, error) {
	name = strings.TrimPrefix(name, ".")
	if d, err := r.files.FindDescriptorByName(protoreflect.FullName(name)); err == nil {
		return d, nil
	}
	a, err := r.ask("file_containing_symbol", name)
	if err != nil {
		return nil, err
	}
	if err := r.take(a, name); err != nil {
		return nil, err
	}
	d, err := r.files.FindDescriptorByName(protoreflect.FullName(name))
	if err != nil {
		return nil, &dynamic.NotFoundError{Name: name, Where: "in the files the server sent"}
	}
	return d, nil
}

// take adds the files of a, the answer about the symbol name, fetches the
// imports still missing, and rebuilds the registry.
func (r *reflectionSource) take(a *reflectionAnswer, name string) error {
	what, first := fmt.Sprintf("symbol %q", name), true
	for ; ; first = false {
		if a.failed {
			if a.code == codes.NotFound && first {
				return &dynamic.NotFoundError{Name: name, Where: "on the server (" + a.message + ")"}
			}
			return fmt.Errorf("reflection: %s: %s: %s", what, a.code, a.message)
		}
		if !a.sentFiles {
			return fmt.Errorf("reflection: %s: the server answered with no file", what)
		}
		added := false
		for _, b := range a.files {
			fd := new(descriptorpb.FileDescriptorProto)
			if err := proto.Unmarshal(b, fd); err != nil {
				return fmt.Errorf("reflection: %s: a file the server sent does not decode: %w", what, err)
			}
			if _, dup := r.protos[fd.GetName()]; !dup {
				if len(r.protos) >= maxReflectedFiles {
					return fmt.Errorf("reflection: the server sent more than %d files", maxReflectedFiles)
				}
				added = true
			}
			r.add(fd)
		}
		missing := r.missing()
		if missing == "" {
			break
		}
		if !added {
			// The server sent nothing new: asking on would loop.
			return fmt.Errorf("reflection: %s: the server did not send the file asked for", what)
		}
		var err error
		if a, err = r.ask("file_by_filename", missing); err != nil {
			return err
		}
		what = fmt.Sprintf("file %q (imported)", missing)
	}
	files, err := buildFiles(r.protos)
	if err != nil {
		return err
	}
	r.files, r.types = files, dynamicpb.NewTypes(files)
	return nil
}

// missing returns an import of the files received that is not among them,
// or "".
func (r *reflectionSource) missing() string {
	if len(r.wanted) == 0 {
		return ""
	}
	return slices.Min(slices.Collect(maps.Keys(r.wanted)))
}

// add keeps fd, and notes which of its imports are still to come.
func (r *reflectionSource) add(fd *descriptorpb.FileDescriptorProto) {
	r.protos[fd.GetName()] = fd
	delete(r.wanted, fd.GetName())
	for _, dep := range fd.GetDependency() {
		if _, ok := r.protos[dep]; !ok {
			r.wanted[dep] = true
		}
	}
}

// buildFiles turns the files received into descriptors; a set that does
// not link (an import missing, a name declared twice, a type that does not
// resolve) is an error, as from any decoder of what the server sent.
func buildFiles(protos map[string]*descriptorpb.FileDescriptorProto) (*protoregistry.Files, error) {
	set := &descriptorpb.FileDescriptorSet{}
	for _, name := range slices.Sorted(maps.Keys(protos)) {
		set.File = append(set.File, protos[name])
	}
	files, err := protodesc.NewFiles(set)
	if err != nil {
		return nil, fmt.Errorf("reflection: the files the server sent do not form a valid set: %w", err)
	}
	return files, nil
}

// Types resolves the messages of the files received, then those linked
// into the binary.
func (r *reflectionSource) Types() dynamic.Resolver { return reflectedTypes{r} }

// reflectedTypes resolves with the source's current files, so that a
// resolver taken before a later FindSymbol sees that symbol's files too.
type reflectedTypes struct{ r *reflectionSource }

func (t reflectedTypes) FindMessageByName(n protoreflect.FullName) (protoreflect.MessageType, error) {
	if mt, err := t.r.types.FindMessageByName(n); err == nil {
		return mt, nil
	}
	return protoregistry.GlobalTypes.FindMessageByName(n)
}

func (t reflectedTypes) FindMessageByURL(url string) (protoreflect.MessageType, error) {
	if mt, err := t.r.types.FindMessageByURL(url); err == nil {
		return mt, nil
	}
	return protoregistry.GlobalTypes.FindMessageByURL(url)
}

func (t reflectedTypes) FindExtensionByName(n protoreflect.FullName) (protoreflect.ExtensionType, error) {
	if xt, err := t.r.types.FindExtensionByName(n); err == nil {
		return xt, nil
	}
	return protoregistry.GlobalTypes.FindExtensionByName(n)
}

func (t reflectedTypes) FindExtensionByNumber(m protoreflect.FullName, n protoreflect.FieldNumber) (protoreflect.ExtensionType, error) {
	if xt, err := t.r.types.FindExtensionByNumber(m, n); err == nil {
		return xt, nil
	}
	return protoregistry.GlobalTypes.FindExtensionByNumber(m, n)
}
