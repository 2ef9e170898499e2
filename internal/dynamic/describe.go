package dynamic

import (
	"fmt"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// Describe writes d as a .proto-like declaration: a service with its
// methods, a method, a message with its fields, an enum with its values, or
// a field.
func Describe(d protoreflect.Descriptor) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s is %s:\n", d.FullName(), article(kindOf(d)))
	switch d := d.(type) {
	case protoreflect.ServiceDescriptor:
		writeComments(&b, d, "")
		fmt.Fprintf(&b, "service %s {\n", d.Name())
		for i := range d.Methods().Len() {
			writeComments(&b, d.Methods().Get(i), "  ")
			fmt.Fprintf(&b, "  %s\n", methodLine(d.Methods().Get(i)))
		}
		b.WriteString("}\n")
	case protoreflect.MethodDescriptor:
		writeComments(&b, d, "")
		b.WriteString(methodLine(d) + "\n")
	case protoreflect.MessageDescriptor:
		writeMessage(&b, d, "")
	case protoreflect.EnumDescriptor:
		writeEnum(&b, d, "")
	case protoreflect.FieldDescriptor:
		writeComments(&b, d, "")
		b.WriteString(fieldLine(d) + "\n")
	case protoreflect.EnumValueDescriptor:
		writeComments(&b, d, "")
		fmt.Fprintf(&b, "%s = %d;\n", d.Name(), d.Number())
	}
	return b.String()
}

// writeComments writes the comment before d in its .proto file, as "//"
// lines at indent: what the file's source info holds (.proto files
// compiled in process have it; a server's reflection sends it when its
// descriptors carry it, which generated Go code's do not).
func writeComments(b *strings.Builder, d protoreflect.Descriptor, indent string) {
	f := d.ParentFile()
	if f == nil {
		return
	}
	c := f.SourceLocations().ByDescriptor(d).LeadingComments
	if c == "" {
		return
	}
	for _, line := range strings.Split(strings.TrimSuffix(c, "\n"), "\n") {
		fmt.Fprintf(b, "%s//%s\n", indent, line)
	}
}

// article puts "a" or "an" before a kind.
func article(kind string) string {
	if strings.ContainsRune("aeiou", rune(kind[0])) {
		return "an " + kind
	}
	return "a " + kind
}

func kindOf(d protoreflect.Descriptor) string {
	switch d := d.(type) {
	case protoreflect.ServiceDescriptor:
		return "service"
	case protoreflect.MethodDescriptor:
		return "method"
	case protoreflect.MessageDescriptor:
		return "message"
	case protoreflect.EnumDescriptor:
		return "enum"
	case protoreflect.EnumValueDescriptor:
		return "enum value"
	case protoreflect.FieldDescriptor:
		if d.IsExtension() {
			return "extension"
		}
		return "field"
	case protoreflect.OneofDescriptor:
		return "oneof"
	case protoreflect.FileDescriptor:
		return "file"
	}
	return "descriptor"
}

func methodLine(m protoreflect.MethodDescriptor) string {
	in, out := "", ""
	if m.IsStreamingClient() {
		in = "stream "
	}
	if m.IsStreamingServer() {
		out = "stream "
	}
	return fmt.Sprintf("rpc %s ( %s.%s ) returns ( %s.%s );", m.Name(), in, m.Input().FullName(), out, m.Output().FullName())
}

func writeMessage(b *strings.Builder, m protoreflect.MessageDescriptor, indent string) {
	writeComments(b, m, indent)
	fmt.Fprintf(b, "%smessage %s {\n", indent, m.Name())
	in := indent + "  "
	for i := range m.Enums().Len() {
		writeEnum(b, m.Enums().Get(i), in)
	}
	for i := range m.Messages().Len() {
		if nm := m.Messages().Get(i); !nm.IsMapEntry() {
			writeMessage(b, nm, in)
		}
	}
	seenOneof := map[protoreflect.FullName]bool{}
	for i := range m.Fields().Len() {
		f := m.Fields().Get(i)
		if o := f.ContainingOneof(); o != nil && !o.IsSynthetic() {
			if seenOneof[o.FullName()] {
				continue
			}
			seenOneof[o.FullName()] = true
			writeComments(b, o, in)
			fmt.Fprintf(b, "%soneof %s {\n", in, o.Name())
			for j := range o.Fields().Len() {
				writeComments(b, o.Fields().Get(j), in+"  ")
				fmt.Fprintf(b, "%s  %s\n", in, fieldLine(o.Fields().Get(j)))
			}
			fmt.Fprintf(b, "%s}\n", in)
			continue
		}
		writeComments(b, f, in)
		fmt.Fprintf(b, "%s%s\n", in, fieldLine(f))
	}
	fmt.Fprintf(b, "%s}\n", indent)
}

func writeEnum(b *strings.Builder, e protoreflect.EnumDescriptor, indent string) {
	writeComments(b, e, indent)
	fmt.Fprintf(b, "%senum %s {\n", indent, e.Name())
	for i := range e.Values().Len() {
		v := e.Values().Get(i)
		writeComments(b, v, indent+"  ")
		fmt.Fprintf(b, "%s  %s = %d;\n", indent, v.Name(), v.Number())
	}
	fmt.Fprintf(b, "%s}\n", indent)
}

func fieldLine(f protoreflect.FieldDescriptor) string {
	var label string
	switch {
	case f.IsMap():
		return fmt.Sprintf("map<%s, %s> %s = %d;", typeName(f.MapKey()), typeName(f.MapValue()), f.Name(), f.Number())
	case f.IsList():
		label = "repeated "
	case f.HasPresence() && f.ContainingOneof() == nil && f.Message() == nil:
		label = "optional "
	case f.HasPresence() && f.ContainingOneof() != nil && f.ContainingOneof().IsSynthetic():
		label = "optional "
	}
	return fmt.Sprintf("%s%s %s = %d;", label, typeName(f), f.Name(), f.Number())
}

func typeName(f protoreflect.FieldDescriptor) string {
	switch f.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return "." + string(f.Message().FullName())
	case protoreflect.EnumKind:
		return "." + string(f.Enum().FullName())
	}
	return f.Kind().String()
}
