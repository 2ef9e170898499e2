package main

import (
	"context"
	"errors"
	"fmt"
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
	"github.com/rdmarpc/rdmarpc/internal/protoname"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/status"
)

// maxReflectedFiles and maxReflectedBytes bound the files one command
// takes from a server's reflection service: a server that keeps sending new
// ones is refused, not held in memory without end.
const (
	maxReflectedFiles = 10000
	maxReflectedBytes = 64 << 20
)

// reflectionSource is a dynamic.Source that asks a server's reflection
// service (grpc.reflection.v1) over one stream, kept for the command's
// life, and keeps the files it is sent. Not safe for concurrent use: the
// commands ask it one question at a time.
type reflectionSource struct {
	stream *reflectionStream
	cancel context.CancelFunc

	protos  map[string]*descriptorpb.FileDescriptorProto // every file received, by name
	bytes   int                                          // their encoded size
	wanted  []string                                     // imports of protos, in the order seen; some may have come since
	pending []string                                     // protos not yet in files, in the order received
	files   *protoregistry.Files                         // built from protos, each file once
	types   *dynamicpb.Types                             // over files
	built   int                                          // files built into files, counted for the tests
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
	return &reflectionSource{stream: stream, cancel: cancel, protos: make(map[string]*descriptorpb.FileDescriptorProto), files: files, types: dynamicpb.NewTypes(files)}
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
	// The name may be the server's (describe takes the services it
	// lists): a long one would cost the lookup below quadratic time.
	if err := protoname.Check(name); err != nil {
		return nil, fmt.Errorf("symbol: %w", err)
	}
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
// imports still missing, and builds the files new to the registry.
func (r *reflectionSource) take(a *reflectionAnswer, name string) error {
	what, first := "symbol "+protoname.Quote(name), true
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
			if _, dup := r.protos[fd.GetName()]; dup {
				continue // received before
			}
			if len(r.protos) >= maxReflectedFiles {
				return fmt.Errorf("reflection: the server sent more than %d files", maxReflectedFiles)
			}
			if r.bytes += len(b); r.bytes > maxReflectedBytes {
				return fmt.Errorf("reflection: the server sent more than %d MiB of files", maxReflectedBytes>>20)
			}
			// Before protodesc resolves its names, which costs
			// quadratic time in a long one.
			if err := protoname.CheckFile(fd); err != nil {
				return fmt.Errorf("reflection: %s: %w", what, err)
			}
			added = true
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
		what = fmt.Sprintf("file %s (imported)", protoname.Quote(missing))
	}
	return r.build()
}

// missing returns an import of the files received that is not among them,
// or "": the first such import seen, dropping those that have come since.
func (r *reflectionSource) missing() string {
	for len(r.wanted) > 0 {
		if _, ok := r.protos[r.wanted[0]]; !ok {
			return r.wanted[0]
		}
		r.wanted = r.wanted[1:]
	}
	return ""
}

// add keeps fd, and notes which of its imports are still to come.
func (r *reflectionSource) add(fd *descriptorpb.FileDescriptorProto) {
	r.protos[fd.GetName()] = fd
	r.pending = append(r.pending, fd.GetName())
	for _, dep := range fd.GetDependency() {
		if _, ok := r.protos[dep]; !ok {
			r.wanted = append(r.wanted, dep)
		}
	}
}

// build turns the files received since the last build into descriptors,
// each after its imports, into the registry that holds the earlier ones:
// each file is built once, however many symbols a command asks about. A
// file that does not link (an import missing or in a cycle, a name declared
// twice, a type that does not resolve) is an error, as from any decoder of
// what the server sent; the files built before it stay.
func (r *reflectionSource) build() error {
	const building = 1
	state := make(map[string]int)
	var visit func(name string) error
	visit = func(name string) error {
		if _, err := r.files.FindFileByPath(name); err == nil {
			return nil
		}
		fd, ok := r.protos[name]
		if !ok || state[name] == building {
			return fmt.Errorf("file %s: missing, or imported in a cycle", protoname.Quote(name))
		}
		state[name] = building
		for _, dep := range fd.GetDependency() {
			if err := visit(dep); err != nil {
				return err
			}
		}
		r.built++
		f, err := protodesc.NewFile(fd, r.files)
		if err != nil {
			return err
		}
		return r.files.RegisterFile(f)
	}
	for len(r.pending) > 0 {
		name := r.pending[0]
		if err := visit(name); err != nil {
			return fmt.Errorf("reflection: the files the server sent do not form a valid set: %w", err)
		}
		r.pending = r.pending[1:]
	}
	return nil
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
