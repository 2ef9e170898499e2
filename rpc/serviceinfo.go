package rpc

import (
	"cmp"
	"slices"
)

// MethodInfo describes one method of a registered service.
type MethodInfo struct {
	// Name is the method's name, not its full name: "Get".
	Name           string
	IsClientStream bool
	IsServerStream bool
}

// ServiceInfo describes a registered service: its methods, unary ones
// first, and the Metadata of its ServiceDesc (the .proto file's name in
// generated code).
type ServiceInfo struct {
	Methods  []MethodInfo
	Metadata any
}

// GetServiceInfo returns the registered services by full name, as
// gRPC-go's; the reflection service lists them from it.
func (s *Server) GetServiceInfo() map[string]ServiceInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]ServiceInfo, len(s.services))
	for name, svc := range s.services {
		var ms []MethodInfo
		for m := range svc.methods {
			ms = append(ms, MethodInfo{Name: m})
		}
		var ss []MethodInfo
		for m, d := range svc.streams {
			ss = append(ss, MethodInfo{Name: m, IsClientStream: d.ClientStreams, IsServerStream: d.ServerStreams})
		}
		byName := func(l []MethodInfo) {
			slices.SortFunc(l, func(a, b MethodInfo) int { return cmp.Compare(a.Name, b.Name) })
		}
		byName(ms)
		byName(ss)
		out[name] = ServiceInfo{Methods: append(ms, ss...), Metadata: svc.metadata}
	}
	return out
}
