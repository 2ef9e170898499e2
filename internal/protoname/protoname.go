package protoname

import (
	"fmt"
	"strconv"
	"strings"

	"google.golang.org/protobuf/types/descriptorpb"
)

// Bounds on a full name ("pkg.v1.Service.Method", without a leading dot).
// Real ones are far inside both: a long package, a few nested messages and
// a member make some ten parts and a hundred bytes.
const (
	// MaxLen is the longest full name taken, in bytes.
	MaxLen = 1024
	// MaxParts is the most dot-separated parts a full name may have: it
	// bounds the prefixes a registry lookup tries, and so how deep
	// declarations may nest.
	MaxParts = 64
)

// Check returns an error when name is longer than MaxLen or has more than
// MaxParts parts; it reads name once.
func Check(name string) error {
	if len(name) > MaxLen {
		return fmt.Errorf("a name of %d bytes, %s: the most taken is %d", len(name), Quote(name), MaxLen)
	}
	if n := strings.Count(name, ".") + 1; n > MaxParts {
		return fmt.Errorf("a name of %d dot-separated parts, %s: the most taken is %d", n, Quote(name), MaxParts)
	}
	return nil
}

// quoted is how much of a name Quote shows.
const quoted = 64

// Quote quotes name for an error message, cut to its first 64 bytes when
// longer, so that an error about a long name is not itself long.
func Quote(name string) string {
	if len(name) <= quoted {
		return strconv.Quote(name)
	}
	return strconv.Quote(name[:quoted]) + "… (" + strconv.Itoa(len(name)) + " bytes)"
}

// CheckFile returns an error when a name fd declares (its package, and the
// full name of each message, field, oneof, enum, enum value, extension,
// service and method) or refers to (a field's type and extendee, a
// method's input and output) is out of Check's bounds, or when a reference
// is not fully qualified. It reads each name once, building none.
func CheckFile(fd *descriptorpb.FileDescriptorProto) error {
	c := checker{file: fd.GetName()}
	pkg := scope{}
	if p := fd.GetPackage(); p != "" {
		pkg = scope{len: len(p), parts: strings.Count(p, ".") + 1}
		if err := c.fits(pkg, p); err != nil {
			return err
		}
	}
	for _, m := range fd.GetMessageType() {
		if err := c.message(pkg, m); err != nil {
			return err
		}
	}
	for _, e := range fd.GetEnumType() {
		if err := c.enum(pkg, e); err != nil {
			return err
		}
	}
	for _, x := range fd.GetExtension() {
		if err := c.field(pkg, x); err != nil {
			return err
		}
	}
	for _, s := range fd.GetService() {
		in, err := c.declare(pkg, s.GetName())
		if err != nil {
			return err
		}
		for _, m := range s.GetMethod() {
			if _, err := c.declare(in, m.GetName()); err != nil {
				return err
			}
			if err := c.ref(m.GetInputType()); err != nil {
				return err
			}
			if err := c.ref(m.GetOutputType()); err != nil {
				return err
			}
		}
	}
	return nil
}

// scope is a full name by its length and parts, which is all the bounds
// need; the empty package is the zero scope.
type scope struct{ len, parts int }

func (s scope) child(name string) scope {
	if s.parts == 0 {
		return scope{len(name), strings.Count(name, ".") + 1}
	}
	return scope{s.len + 1 + len(name), s.parts + strings.Count(name, ".") + 1}
}

type checker struct{ file string }

func (c checker) fits(s scope, name string) error {
	if s.len > MaxLen || s.parts > MaxParts {
		return fmt.Errorf("file %s declares %s as a name of %d bytes and %d parts: the most taken is %d bytes and %d parts", Quote(c.file), Quote(name), s.len, s.parts, MaxLen, MaxParts)
	}
	return nil
}

// declare returns the scope of name declared in s, if it fits.
func (c checker) declare(s scope, name string) (scope, error) {
	in := s.child(name)
	return in, c.fits(in, name)
}

// ref checks a reference; "" is no reference (a scalar field's type).
func (c checker) ref(name string) error {
	if name == "" {
		return nil
	}
	full, ok := strings.CutPrefix(name, ".")
	if !ok {
		return fmt.Errorf("file %s refers to %s, which is not fully qualified (protoc writes \".pkg.Type\")", Quote(c.file), Quote(name))
	}
	if err := Check(full); err != nil {
		return fmt.Errorf("file %s refers to %w", Quote(c.file), err)
	}
	return nil
}

func (c checker) message(s scope, m *descriptorpb.DescriptorProto) error {
	in, err := c.declare(s, m.GetName())
	if err != nil {
		return err
	}
	for _, f := range m.GetField() {
		if err := c.field(in, f); err != nil {
			return err
		}
	}
	for _, x := range m.GetExtension() {
		if err := c.field(in, x); err != nil {
			return err
		}
	}
	for _, o := range m.GetOneofDecl() {
		if _, err := c.declare(in, o.GetName()); err != nil {
			return err
		}
	}
	for _, e := range m.GetEnumType() {
		if err := c.enum(in, e); err != nil {
			return err
		}
	}
	for _, n := range m.GetNestedType() {
		if err := c.message(in, n); err != nil {
			return err
		}
	}
	return nil
}

func (c checker) field(s scope, f *descriptorpb.FieldDescriptorProto) error {
	if _, err := c.declare(s, f.GetName()); err != nil {
		return err
	}
	if err := c.ref(f.GetTypeName()); err != nil {
		return err
	}
	return c.ref(f.GetExtendee())
}

// enum checks an enum declared in s; its values are declared in s too,
// beside the enum (C++ scoping), not inside it.
func (c checker) enum(s scope, e *descriptorpb.EnumDescriptorProto) error {
	if _, err := c.declare(s, e.GetName()); err != nil {
		return err
	}
	for _, v := range e.GetValue() {
		if _, err := c.declare(s, v.GetName()); err != nil {
			return err
		}
	}
	return nil
}
