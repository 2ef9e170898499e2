package codegen

import (
	"errors"
	"fmt"
	"go/token"
	"path"
	"strings"

	"google.golang.org/protobuf/compiler/protogen"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/pluginpb"
)

// The packages generated code imports.
const (
	contextPackage = protogen.GoImportPath("context")
	fmtPackage     = protogen.GoImportPath("fmt")
	rpcPackage     = protogen.GoImportPath("github.com/rdmarpc/rdmarpc/rpc")
	codesPackage   = protogen.GoImportPath("github.com/rdmarpc/rdmarpc/codes")
	statusPackage  = protogen.GoImportPath("github.com/rdmarpc/rdmarpc/status")
)

// FileSuffix ends the name of every generated file: foo.proto gives
// foo_rdmarpc.pb.go.
const FileSuffix = "_rdmarpc.pb.go"

// Run is the whole plugin: it answers a CodeGeneratorRequest as
// protoc-gen-go-rdmarpc does over stdin and stdout. Failures, bad options
// included, are reported in the response's Error field, as protoc expects.
func Run(req *pluginpb.CodeGeneratorRequest) *pluginpb.CodeGeneratorResponse {
	opts := DefaultOptions()
	gen, err := opts.ProtogenOptions().New(req)
	if err != nil {
		return &pluginpb.CodeGeneratorResponse{Error: proto.String(err.Error())}
	}
	if err := Generate(gen, opts); err != nil {
		gen.Error(err)
	}
	return gen.Response()
}

// Generate generates stubs for every file gen was asked to generate and
// declares the features the generator supports. Files without services get
// no stub file.
func Generate(gen *protogen.Plugin, opts Options) error {
	gen.SupportedFeatures = uint64(pluginpb.CodeGeneratorResponse_FEATURE_PROTO3_OPTIONAL |
		pluginpb.CodeGeneratorResponse_FEATURE_SUPPORTS_EDITIONS)
	// Stubs depend on no field-level feature, so every edition protogen
	// understands is fine: the range protoc-gen-go and protoc-gen-go-grpc
	// declare.
	gen.SupportedEditionsMinimum = descriptorpb.Edition_EDITION_PROTO2
	gen.SupportedEditionsMaximum = descriptorpb.Edition_EDITION_2024

	var errs []error
	for _, f := range gen.Files {
		if f.Generate {
			_, err := GenerateFile(gen, f, opts)
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// GenerateFile generates the stub file for f and returns it, or returns nil
// when f has no services.
func GenerateFile(gen *protogen.Plugin, f *protogen.File, opts Options) (*protogen.GeneratedFile, error) {
	if len(f.Services) == 0 {
		return nil, nil
	}
	pkg, err := stubPackageOf(f, opts.PackageSuffix)
	if err != nil {
		return nil, err
	}
	g := gen.NewGeneratedFile(pkg.filePrefix+FileSuffix, pkg.importPath)
	// The comments above syntax (a license header, usually) and above
	// package are carried, as protoc-gen-go and protoc-gen-go-grpc do.
	genLeadingComments(g, f.Desc.SourceLocations().ByPath(protoreflect.SourcePath{fileSyntaxField}))
	genHeader(gen, g, f)
	genLeadingComments(g, f.Desc.SourceLocations().ByPath(protoreflect.SourcePath{filePackageField}))
	g.P("package ", pkg.name)
	g.P()
	g.P("// This guard fails to compile when the rpc package in the build is not")
	g.P("// the one this file was generated for; regenerate the file with the")
	g.P("// ", PluginName, " (or rdmarpc gen) that comes with that rpc package.")
	g.P("const _ = ", rpcPackage.Ident("SupportPackageIsVersion2"))
	g.P()
	for _, s := range f.Services {
		(&serviceGen{g: g, f: f, s: s, pkgName: pkg.name, opts: opts}).generate()
	}
	return g, nil
}

// Field numbers of google.protobuf.FileDescriptorProto, for source locations.
const (
	filePackageField = 2
	fileSyntaxField  = 12
)

func genLeadingComments(g *protogen.GeneratedFile, loc protoreflect.SourceLocation) {
	for _, c := range loc.LeadingDetachedComments {
		g.P(protogen.Comments(c))
		g.P()
	}
	if c := loc.LeadingComments; c != "" {
		g.P(protogen.Comments(c))
		g.P()
	}
}

// stubPackage is where a file's stubs go.
type stubPackage struct {
	name       protogen.GoPackageName
	importPath protogen.GoImportPath
	filePrefix string // the generated file's name, less FileSuffix
}

// stubPackageOf returns f's own package when suffix is empty, else the
// package named f's package name plus suffix, in a directory of that name
// inside f's: example.com/foo/foopb/x.proto's stubs go to
// example.com/foo/foopb/foopbrdmarpc, package foopbrdmarpc, which imports
// foopb for the messages.
func stubPackageOf(f *protogen.File, suffix string) (stubPackage, error) {
	if suffix == "" {
		return stubPackage{name: f.GoPackageName, importPath: f.GoImportPath, filePrefix: f.GeneratedFilenamePrefix}, nil
	}
	name := string(f.GoPackageName) + suffix
	if !token.IsIdentifier(name) {
		return stubPackage{}, fmt.Errorf("%s: package_suffix=%s makes the package name %q, which is not a Go identifier",
			f.Desc.Path(), suffix, name)
	}
	dir, base := path.Split(f.GeneratedFilenamePrefix)
	return stubPackage{
		name:       protogen.GoPackageName(name),
		importPath: protogen.GoImportPath(path.Join(string(f.GoImportPath), name)),
		filePrefix: path.Join(dir, name, base),
	}, nil
}

func genHeader(gen *protogen.Plugin, g *protogen.GeneratedFile, f *protogen.File) {
	compiler := "(unknown)"
	if v := gen.Request.GetCompilerVersion(); v != nil {
		compiler = fmt.Sprintf("v%d.%d.%d", v.GetMajor(), v.GetMinor(), v.GetPatch())
		if s := v.GetSuffix(); s != "" {
			compiler += "-" + s
		}
	}
	g.P("// Code generated by ", PluginName, ". DO NOT EDIT.")
	g.P("// versions:")
	g.P("// - ", PluginName, " ", Version)
	g.P("// - protoc                ", compiler)
	g.P("// source: ", f.Desc.Path())
	g.P()
}

// serviceGen writes the code of one service.
type serviceGen struct {
	g       *protogen.GeneratedFile
	f       *protogen.File
	s       *protogen.Service
	pkgName protogen.GoPackageName // of the stubs, f's unless package_suffix
	opts    Options
}

func (sg *serviceGen) generate() {
	sg.genMethodNames()
	sg.genClient()
	sg.genServer()
	sg.genRegister()
	sg.genHandlers()
	sg.genServiceDesc()
}

// Names of the generated identifiers of a service.
func (sg *serviceGen) clientName() string     { return sg.s.GoName + "Client" }
func (sg *serviceGen) clientImplName() string { return unexport(sg.s.GoName) + "Client" }
func (sg *serviceGen) serverName() string     { return sg.s.GoName + "Server" }
func (sg *serviceGen) unimplementedName() string {
	return "Unimplemented" + sg.serverName()
}
func (sg *serviceGen) descName() string { return sg.s.GoName + "_ServiceDesc" }
func (sg *serviceGen) mustEmbedName() string {
	return "mustEmbed" + sg.unimplementedName()
}
func (sg *serviceGen) fullMethodConst(m *protogen.Method) string {
	return sg.s.GoName + "_" + m.GoName + "_FullMethodName"
}
func (sg *serviceGen) handlerName(m *protogen.Method) string {
	return "_" + sg.s.GoName + "_" + m.GoName + "_Handler"
}

func (sg *serviceGen) deprecated() bool {
	return sg.s.Desc.Options().(*descriptorpb.ServiceOptions).GetDeprecated()
}

func methodDeprecated(m *protogen.Method) bool {
	return m.Desc.Options().(*descriptorpb.MethodOptions).GetDeprecated()
}

// deprecation writes a "Deprecated:" paragraph, set off by an empty comment
// line when it follows other comment lines, as go doc wants.
func (sg *serviceGen) deprecation(afterComment bool) {
	if afterComment {
		sg.g.P("//")
	}
	sg.g.P("// Deprecated: Marked as deprecated in ", sg.f.Desc.Path(), ".")
}

// serviceDoc writes the doc comment of a client or server type: a sentence
// that names the type, then the service's own leading comment.
func (sg *serviceGen) serviceDoc(first string) {
	g := sg.g
	g.P("// ", first)
	if c := sg.s.Comments.Leading; c != "" {
		g.P("//")
		g.P(strings.TrimSuffix(c.String(), "\n"))
	}
	if sg.deprecated() {
		sg.deprecation(true)
	}
}

// methodDoc writes a method's leading comment and deprecation.
func (sg *serviceGen) methodDoc(m *protogen.Method) {
	c := m.Comments.Leading
	if c != "" {
		sg.g.P(strings.TrimSuffix(c.String(), "\n"))
	}
	if methodDeprecated(m) {
		sg.deprecation(c != "")
	}
}

func (sg *serviceGen) genMethodNames() {
	g := sg.g
	if len(sg.s.Methods) == 0 {
		return
	}
	g.P("// Full names of the methods of ", sg.s.Desc.FullName(), ", as calls and")
	g.P("// interceptors see them.")
	g.P("const (")
	for _, m := range sg.s.Methods {
		g.P(sg.fullMethodConst(m), ` = "/`, sg.s.Desc.FullName(), "/", m.Desc.Name(), `"`)
	}
	g.P(")")
	g.P()
}

func streaming(m *protogen.Method) bool {
	return m.Desc.IsStreamingClient() || m.Desc.IsStreamingServer()
}

// typeArgs are the type arguments of m's generic stream types: the request
// and response messages, or the response alone for a server stream.
func (sg *serviceGen) typeArgs(m *protogen.Method, both bool) string {
	out := sg.g.QualifiedGoIdent(m.Output.GoIdent)
	if !both {
		return "[" + out + "]"
	}
	return "[" + sg.g.QualifiedGoIdent(m.Input.GoIdent) + ", " + out + "]"
}

// clientStreamType is what the client method of a streaming method returns.
func (sg *serviceGen) clientStreamType(m *protogen.Method) string {
	g := sg.g
	switch {
	case m.Desc.IsStreamingClient() && m.Desc.IsStreamingServer():
		return g.QualifiedGoIdent(rpcPackage.Ident("BidiStreamingClient")) + sg.typeArgs(m, true)
	case m.Desc.IsStreamingClient():
		return g.QualifiedGoIdent(rpcPackage.Ident("ClientStreamingClient")) + sg.typeArgs(m, true)
	}
	return g.QualifiedGoIdent(rpcPackage.Ident("ServerStreamingClient")) + sg.typeArgs(m, false)
}

// serverStreamType is what the server method of a streaming method gets.
func (sg *serviceGen) serverStreamType(m *protogen.Method) string {
	g := sg.g
	switch {
	case m.Desc.IsStreamingClient() && m.Desc.IsStreamingServer():
		return g.QualifiedGoIdent(rpcPackage.Ident("BidiStreamingServer")) + sg.typeArgs(m, true)
	case m.Desc.IsStreamingClient():
		return g.QualifiedGoIdent(rpcPackage.Ident("ClientStreamingServer")) + sg.typeArgs(m, true)
	}
	return g.QualifiedGoIdent(rpcPackage.Ident("ServerStreamingServer")) + sg.typeArgs(m, false)
}

// clientSignature is gRPC-go's: a client-streaming method takes no request,
// a streaming one returns its stream.
func (sg *serviceGen) clientSignature(m *protogen.Method) string {
	g := sg.g
	s := m.GoName + "(ctx " + g.QualifiedGoIdent(contextPackage.Ident("Context"))
	if !m.Desc.IsStreamingClient() {
		s += ", in *" + g.QualifiedGoIdent(m.Input.GoIdent)
	}
	s += ", opts ..." + g.QualifiedGoIdent(rpcPackage.Ident("CallOption")) + ") ("
	if streaming(m) {
		s += sg.clientStreamType(m)
	} else {
		s += "*" + g.QualifiedGoIdent(m.Output.GoIdent)
	}
	return s + ", error)"
}

// serverSignature is gRPC-go's: a streaming method gets no context (its
// stream has it) and the request only when the client sends one.
func (sg *serviceGen) serverSignature(m *protogen.Method) string {
	g := sg.g
	if !streaming(m) {
		return m.GoName + "(" + g.QualifiedGoIdent(contextPackage.Ident("Context")) +
			", *" + g.QualifiedGoIdent(m.Input.GoIdent) +
			") (*" + g.QualifiedGoIdent(m.Output.GoIdent) + ", error)"
	}
	var args []string
	if !m.Desc.IsStreamingClient() {
		args = append(args, "*"+g.QualifiedGoIdent(m.Input.GoIdent))
	}
	args = append(args, sg.serverStreamType(m))
	return m.GoName + "(" + strings.Join(args, ", ") + ") error"
}

func (sg *serviceGen) genClient() {
	g, s := sg.g, sg.s
	cc := g.QualifiedGoIdent(rpcPackage.Ident("ClientConnInterface"))

	sg.serviceDoc(fmt.Sprintf("%s is the client API for the %s service.", sg.clientName(), s.Desc.FullName()))
	g.AnnotateSymbol(sg.clientName(), protogen.Annotation{Location: s.Location})
	g.P("type ", sg.clientName(), " interface {")
	for _, m := range s.Methods {
		sg.methodDoc(m)
		g.AnnotateSymbol(sg.clientName()+"."+m.GoName, protogen.Annotation{Location: m.Location})
		g.P(sg.clientSignature(m))
	}
	g.P("}")
	g.P()

	g.P("type ", sg.clientImplName(), " struct {")
	g.P("cc ", cc)
	g.P("}")
	g.P()

	g.P("// New", sg.clientName(), " returns a client of the ", s.Desc.FullName(), " service that")
	g.P("// makes its calls through cc, an *rpc.ClientConn usually.")
	if sg.deprecated() {
		sg.deprecation(true)
	}
	g.P("func New", sg.clientName(), "(cc ", cc, ") ", sg.clientName(), " {")
	g.P("return &", sg.clientImplName(), "{cc}")
	g.P("}")
	g.P()

	stream := 0 // index of a streaming method in the descriptor's Streams
	for _, m := range s.Methods {
		if methodDeprecated(m) {
			sg.deprecation(false)
		}
		g.P("func (c *", sg.clientImplName(), ") ", sg.clientSignature(m), " {")
		if !streaming(m) {
			g.P("out := new(", m.Output.GoIdent, ")")
			g.P("if err := c.cc.Invoke(ctx, ", sg.fullMethodConst(m), ", in, out, opts...); err != nil {")
			g.P("return nil, err")
			g.P("}")
			g.P("return out, nil")
			g.P("}")
			g.P()
			continue
		}
		g.P("stream, err := c.cc.NewStream(ctx, &", sg.descName(), ".Streams[", stream, "], ", sg.fullMethodConst(m), ", opts...)")
		stream++
		g.P("if err != nil {")
		g.P("return nil, err")
		g.P("}")
		g.P("x := &", rpcPackage.Ident("GenericClientStream"), sg.typeArgs(m, true), "{ClientStream: stream}")
		if !m.Desc.IsStreamingClient() {
			g.P("if err := x.ClientStream.SendMsg(in); err != nil {")
			g.P("return nil, err")
			g.P("}")
			g.P("if err := x.ClientStream.CloseSend(); err != nil {")
			g.P("return nil, err")
			g.P("}")
		}
		g.P("return x, nil")
		g.P("}")
		g.P()
		alias := sg.s.GoName + "_" + m.GoName + "Client"
		g.P("// ", alias, " names the client's stream of ", m.GoName, " as gRPC-go's")
		g.P("// stubs did before they were generic, for code that uses that name.")
		g.P("type ", alias, " = ", sg.clientStreamType(m))
		g.P()
	}
}

func (sg *serviceGen) genServer() {
	g, s := sg.g, sg.s
	unimpl := sg.unimplementedName()

	sg.serviceDoc(fmt.Sprintf("%s is the server API for the %s service.", sg.serverName(), s.Desc.FullName()))
	if sg.opts.RequireUnimplementedServers {
		g.P("//")
		g.P("// Implementations must embed ", unimpl, " by value, so that they")
		g.P("// keep compiling, and answer codes.Unimplemented, when methods are added")
		g.P("// to the service.")
	}
	g.AnnotateSymbol(sg.serverName(), protogen.Annotation{Location: s.Location})
	g.P("type ", sg.serverName(), " interface {")
	for _, m := range s.Methods {
		sg.methodDoc(m)
		g.AnnotateSymbol(sg.serverName()+"."+m.GoName, protogen.Annotation{Location: m.Location})
		g.P(sg.serverSignature(m))
	}
	if sg.opts.RequireUnimplementedServers {
		g.P(sg.mustEmbedName(), "()")
	}
	g.P("}")
	g.P()

	g.P("// ", unimpl, " answers every method of ", s.Desc.FullName(), " with")
	g.P("// codes.Unimplemented. Embed it by value in implementations: a nil")
	g.P("// *", unimpl, " would crash the server on the first call of a method")
	g.P("// the implementation lacks, and Register", sg.serverName(), " refuses it.")
	g.P("type ", unimpl, " struct{}")
	g.P()
	for _, m := range s.Methods {
		g.P("func (", unimpl, ") ", sg.serverSignature(m), " {")
		nilResult := "nil, "
		if streaming(m) {
			nilResult = ""
		}
		g.P("return ", nilResult, statusPackage.Ident("Errorf"), "(", codesPackage.Ident("Unimplemented"),
			`, "method `, m.GoName, ` not implemented")`)
		g.P("}")
	}
	if sg.opts.RequireUnimplementedServers {
		g.P("func (", unimpl, ") ", sg.mustEmbedName(), "() {}")
	}
	// A pointer receiver: reached through a nil embedded pointer, it runs
	// (and tells) instead of crashing as a value receiver would.
	g.P("func (u *", unimpl, ") isNil", unimpl, "() bool { return u == nil }")
	g.P()

	if sg.opts.RequireUnimplementedServers {
		g.P("// Unsafe", sg.serverName(), " may be embedded instead of ", unimpl, " to opt")
		g.P("// out of forward compatibility: an implementation that embeds it stops")
		g.P("// compiling when methods are added to the service. Not recommended.")
		g.P("type Unsafe", sg.serverName(), " interface {")
		g.P(sg.mustEmbedName(), "()")
		g.P("}")
		g.P()
	}
}

func (sg *serviceGen) genRegister() {
	g, s := sg.g, sg.s
	unimpl := sg.unimplementedName()
	name := "Register" + sg.serverName()

	g.P("// ", name, " registers srv, the implementation of ", s.Desc.FullName(), ",")
	g.P("// with s, an *rpc.Server usually. It panics when srv embeds a nil")
	g.P("// *", unimpl, ", a programming error better found at startup than")
	g.P("// on the first call of a method srv lacks.")
	if sg.deprecated() {
		sg.deprecation(true)
	}
	g.P("func ", name, "(s ", rpcPackage.Ident("ServiceRegistrar"), ", srv ", sg.serverName(), ") {")
	g.P("if u, ok := srv.(interface{ isNil", unimpl, "() bool }); ok && u.isNil", unimpl, "() {")
	g.P("panic(", fmtPackage.Ident("Sprintf"), `("`, name, `: %T embeds *`, unimpl, ` and that pointer is nil; `,
		`embed `, unimpl, ` by value instead (struct{ `, sg.pkgName, ".", unimpl,
		`; ... })", srv))`)
	g.P("}")
	g.P("s.RegisterService(&", sg.descName(), ", srv)")
	g.P("}")
	g.P()
}

func (sg *serviceGen) genHandlers() {
	for _, m := range sg.s.Methods {
		if streaming(m) {
			sg.genStreamHandler(m)
		} else {
			sg.genUnaryHandler(m)
		}
	}
}

func (sg *serviceGen) genUnaryHandler(m *protogen.Method) {
	g := sg.g
	call := "srv.(" + sg.serverName() + ")." + m.GoName
	g.P("func ", sg.handlerName(m), "(srv any, ctx ", contextPackage.Ident("Context"),
		", dec func(any) error, interceptor ", rpcPackage.Ident("UnaryServerInterceptor"), ") (any, error) {")
	g.P("in := new(", m.Input.GoIdent, ")")
	g.P("if err := dec(in); err != nil {")
	g.P("return nil, err")
	g.P("}")
	g.P("if interceptor == nil {")
	g.P("return ", call, "(ctx, in)")
	g.P("}")
	g.P("info := &", rpcPackage.Ident("UnaryServerInfo"), "{Server: srv, FullMethod: ", sg.fullMethodConst(m), "}")
	g.P("handler := func(ctx ", contextPackage.Ident("Context"), ", req any) (any, error) {")
	g.P("return ", call, "(ctx, req.(*", m.Input.GoIdent, "))")
	g.P("}")
	g.P("return interceptor(ctx, in, info, handler)")
	g.P("}")
	g.P()
}

// genStreamHandler writes a StreamHandler: it reads the one request of a
// server-streaming method itself, as gRPC-go's generated handlers do.
func (sg *serviceGen) genStreamHandler(m *protogen.Method) {
	g := sg.g
	call := "srv.(" + sg.serverName() + ")." + m.GoName
	typed := g.QualifiedGoIdent(rpcPackage.Ident("GenericServerStream")) + sg.typeArgs(m, true) + "{ServerStream: stream}"
	g.P("func ", sg.handlerName(m), "(srv any, stream ", rpcPackage.Ident("ServerStream"), ") error {")
	if m.Desc.IsStreamingClient() {
		g.P("return ", call, "(&", typed, ")")
	} else {
		g.P("in := new(", m.Input.GoIdent, ")")
		g.P("if err := stream.RecvMsg(in); err != nil {")
		g.P("return err")
		g.P("}")
		g.P("return ", call, "(in, &", typed, ")")
	}
	g.P("}")
	g.P()
	alias := sg.s.GoName + "_" + m.GoName + "Server"
	g.P("// ", alias, " names the server's stream of ", m.GoName, " as gRPC-go's")
	g.P("// stubs did before they were generic, for code that uses that name.")
	g.P("type ", alias, " = ", sg.serverStreamType(m))
	g.P()
}

func (sg *serviceGen) genServiceDesc() {
	g, s := sg.g, sg.s
	g.P("// ", sg.descName(), " describes the ", s.Desc.FullName(), " service to")
	g.P("// rpc.ServiceRegistrar.RegisterService; Register", sg.serverName(), " passes it.")
	g.P("// Use it only for that: it is not meant to be inspected or changed.")
	g.P("var ", sg.descName(), " = ", rpcPackage.Ident("ServiceDesc"), "{")
	g.P("ServiceName: ", fmt.Sprintf("%q", s.Desc.FullName()), ",")
	g.P("HandlerType: (*", sg.serverName(), ")(nil),")
	g.P("Methods: []", rpcPackage.Ident("MethodDesc"), "{")
	for _, m := range s.Methods {
		if streaming(m) {
			continue
		}
		g.P("{")
		g.P("MethodName: ", fmt.Sprintf("%q", m.Desc.Name()), ",")
		g.P("Handler: ", sg.handlerName(m), ",")
		g.P("},")
	}
	g.P("},")
	g.P("Streams: []", rpcPackage.Ident("StreamDesc"), "{")
	for _, m := range s.Methods {
		if !streaming(m) {
			continue
		}
		g.P("{")
		g.P("StreamName: ", fmt.Sprintf("%q", m.Desc.Name()), ",")
		g.P("Handler: ", sg.handlerName(m), ",")
		if m.Desc.IsStreamingServer() {
			g.P("ServerStreams: true,")
		}
		if m.Desc.IsStreamingClient() {
			g.P("ClientStreams: true,")
		}
		g.P("},")
	}
	g.P("},")
	g.P("Metadata: ", fmt.Sprintf("%q", sg.f.Desc.Path()), ",")
	g.P("}")
	g.P()
}

// unexport lower-cases the first letter of an identifier.
func unexport(s string) string {
	if s == "" {
		return s
	}
	return strings.ToLower(s[:1]) + s[1:]
}
