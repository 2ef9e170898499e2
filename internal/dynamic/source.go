package dynamic

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/rdmarpc/rdmarpc/internal/compile"
)

// Source is where descriptors come from: Files, or a server's reflection
// service (cmd/rdmarpc's client of grpc.reflection.v1, which answers the
// same two questions with list_services and file_containing_symbol).
type Source interface {
	// ListServices returns the full names of the services the source
	// knows, sorted.
	ListServices(ctx context.Context) ([]string, error)
	// FindSymbol returns the descriptor of a service, method, message,
	// enum or field by its full name ("pkg.Service", "pkg.Service.Method").
	FindSymbol(ctx context.Context, name string) (protoreflect.Descriptor, error)
	// Types resolves message types by name or type URL, for protojson
	// (google.protobuf.Any, status details).
	Types() Resolver
}

// Resolver resolves message types, for protojson and Any.
type Resolver interface {
	protoregistry.MessageTypeResolver
	protoregistry.ExtensionTypeResolver
}

// Files is a Source over .proto files compiled in process.
type Files struct {
	files *protoregistry.Files
	types *dynamicpb.Types
}

// LoadProtos compiles the .proto files (as `rdmarpc gen` does: importPaths
// as protoc's -I, "." when none) and returns them as a Source.
func LoadProtos(ctx context.Context, importPaths, files []string) (*Files, error) {
	if len(files) == 0 {
		return nil, fmt.Errorf("no .proto file given (--proto FILE)")
	}
	req, err := compile.Request(ctx, compile.Config{ImportPaths: importPaths, Files: files})
	if err != nil {
		return nil, err
	}
	reg, err := protodesc.NewFiles(&descriptorpb.FileDescriptorSet{File: req.ProtoFile})
	if err != nil {
		return nil, fmt.Errorf("building descriptors: %w", err)
	}
	return &Files{files: reg, types: dynamicpb.NewTypes(reg)}, nil
}

// ListServices returns every service of the files and of what they import.
func (f *Files) ListServices(context.Context) ([]string, error) {
	var names []string
	f.files.RangeFiles(func(fd protoreflect.FileDescriptor) bool {
		for i := range fd.Services().Len() {
			names = append(names, string(fd.Services().Get(i).FullName()))
		}
		return true
	})
	slices.Sort(names)
	return names, nil
}

// FindSymbol finds a descriptor by its full name.
func (f *Files) FindSymbol(_ context.Context, name string) (protoreflect.Descriptor, error) {
	name = strings.TrimPrefix(name, ".")
	d, err := f.files.FindDescriptorByName(protoreflect.FullName(name))
	if err != nil {
		return nil, &NotFoundError{Name: name, Where: "in the .proto files given"}
	}
	return d, nil
}

// NotFoundError is FindSymbol's answer for a name the source does not
// know; any other error is the source's own failure (a server that does
// not answer, say).
type NotFoundError struct {
	Name  string
	Where string // "in the .proto files given"
}

func (e *NotFoundError) Error() string { return fmt.Sprintf("symbol %q not found %s", e.Name, e.Where) }

// Types resolves the messages of the files, then those linked into the
// binary (the well-known types, google.rpc error details).
func (f *Files) Types() Resolver { return chain{f.types} }

// chain resolves with r first, then with the global registry.
type chain struct{ r Resolver }

func (c chain) FindMessageByName(n protoreflect.FullName) (protoreflect.MessageType, error) {
	if mt, err := c.r.FindMessageByName(n); err == nil {
		return mt, nil
	}
	return protoregistry.GlobalTypes.FindMessageByName(n)
}

func (c chain) FindMessageByURL(url string) (protoreflect.MessageType, error) {
	if mt, err := c.r.FindMessageByURL(url); err == nil {
		return mt, nil
	}
	return protoregistry.GlobalTypes.FindMessageByURL(url)
}

func (c chain) FindExtensionByName(n protoreflect.FullName) (protoreflect.ExtensionType, error) {
	if xt, err := c.r.FindExtensionByName(n); err == nil {
		return xt, nil
	}
	return protoregistry.GlobalTypes.FindExtensionByName(n)
}

func (c chain) FindExtensionByNumber(m protoreflect.FullName, n protoreflect.FieldNumber) (protoreflect.ExtensionType, error) {
	if xt, err := c.r.FindExtensionByNumber(m, n); err == nil {
		return xt, nil
	}
	return protoregistry.GlobalTypes.FindExtensionByNumber(m, n)
}

// Method is a method found by name, with what a caller needs.
type Method struct {
	Desc protoreflect.MethodDescriptor
	// FullMethod is the name the RPC layer calls: "/pkg.Service/Method".
	FullMethod string
}

// Streaming reports whether the method streams either way.
func (m Method) Streaming() bool { return m.Desc.IsStreamingClient() || m.Desc.IsStreamingServer() }

// Kind is "unary", "server streaming", "client streaming" or "bidi streaming".
func (m Method) Kind() string {
	switch c, s := m.Desc.IsStreamingClient(), m.Desc.IsStreamingServer(); {
	case c && s:
		return "bidi streaming"
	case c:
		return "client streaming"
	case s:
		return "server streaming"
	}
	return "unary"
}

// FindMethod finds a method named as grpcurl takes it: "pkg.Service/Method",
// "pkg.Service.Method" or "/pkg.Service/Method".
func FindMethod(ctx context.Context, src Source, name string) (Method, error) {
	n := strings.TrimPrefix(name, "/")
	svc, meth, ok := strings.Cut(n, "/")
	if !ok {
		i := strings.LastIndexByte(n, '.')
		if i <= 0 || i == len(n)-1 {
			return Method{}, fmt.Errorf("method %q: want package.Service/Method", name)
		}
		svc, meth = n[:i], n[i+1:]
	}
	d, err := src.FindSymbol(ctx, svc)
	var nf *NotFoundError
	if errors.As(err, &nf) {
		return Method{}, fmt.Errorf("method %q: service %q not found", name, svc)
	} else if err != nil {
		return Method{}, err
	}
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if !ok {
		return Method{}, fmt.Errorf("method %q: %s is %s, not a service", name, svc, article(kindOf(d)))
	}
	md := sd.Methods().ByName(protoreflect.Name(meth))
	if md == nil {
		var have []string
		for i := range sd.Methods().Len() {
			have = append(have, string(sd.Methods().Get(i).Name()))
		}
		return Method{}, fmt.Errorf("method %q: service %s has no method %q (it has: %s)", name, svc, meth, strings.Join(have, ", "))
	}
	return Method{Desc: md, FullMethod: "/" + string(sd.FullName()) + "/" + string(md.Name())}, nil
}
