package authz

import (
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/rdmarpc/rdmarpc/credentials"
	"github.com/rdmarpc/rdmarpc/metadata"
)

// The policy as written (encoding/json matches the keys without regard to
// case, as gRPC-go's does).
type jsonPolicy struct {
	Name                *string         `json:"name"`
	DenyRules           []jsonRule      `json:"deny_rules"`
	AllowRules          []jsonRule      `json:"allow_rules"`
	AuditLoggingOptions json.RawMessage `json:"audit_logging_options"`
}

type jsonRule struct {
	Name   string `json:"name"`
	Source struct {
		Principals []string `json:"principals"`
	} `json:"source"`
	Request struct {
		Paths   []string     `json:"paths"`
		Headers []jsonHeader `json:"headers"`
	} `json:"request"`
}

type jsonHeader struct {
	Key    string   `json:"key"`
	Values []string `json:"values"`
}

// policy is a parsed policy: calls a deny rule matches are refused, then
// those an allow rule matches are let through.
type policy struct {
	name        string
	deny, allow []rule
}

// rule matches a call when each of its parts given matches.
type rule struct {
	name       string
	principals []matcher // nil: any peer
	paths      []matcher // nil: any method
	headers    []headerMatcher
}

type headerMatcher struct {
	key    string
	values []matcher
}

// matcher is one string of a policy: exact, prefix ("abc*"), suffix
// ("*abc"), or any present value ("*").
type matcher struct {
	s               string
	prefix, present bool
	suffix          bool
}

func newMatcher(s string) matcher {
	switch {
	case s == "*":
		return matcher{present: true}
	case strings.HasSuffix(s, "*"):
		return matcher{s: strings.TrimSuffix(s, "*"), prefix: true}
	case strings.HasPrefix(s, "*"):
		return matcher{s: strings.TrimPrefix(s, "*"), suffix: true}
	}
	return matcher{s: s}
}

func (m matcher) match(v string) bool {
	switch {
	case m.present:
		return v != ""
	case m.prefix:
		return strings.HasPrefix(v, m.s)
	case m.suffix:
		return strings.HasSuffix(v, m.s)
	}
	return v == m.s
}

func matchers(ss []string) []matcher {
	if len(ss) == 0 {
		return nil
	}
	ms := make([]matcher, len(ss))
	for i, s := range ss {
		ms[i] = newMatcher(s)
	}
	return ms
}

// unsupportedHeaders are header keys a policy may not name: HTTP's own.
var unsupportedHeaders = map[string]bool{
	"host": true, "connection": true, "keep-alive": true, "proxy-authenticate": true,
	"proxy-authorization": true, "te": true, "trailer": true, "transfer-encoding": true,
	"upgrade": true,
}

// parsePolicy parses a policy in gRPC's format; errors say what is wrong
// where.
func parsePolicy(s string) (*policy, error) {
	var jp jsonPolicy
	if err := json.Unmarshal([]byte(s), &jp); err != nil {
		return nil, fmt.Errorf("failed to unmarshal policy: %v", err)
	}
	if jp.Name == nil {
		return nil, errors.New(`"name" is not present`)
	}
	if jp.AllowRules == nil {
		return nil, errors.New(`"allow_rules" is not present`)
	}
	if err := checkAudit(jp.AuditLoggingOptions); err != nil {
		return nil, err
	}
	p := &policy{name: *jp.Name}
	var err error
	if p.deny, err = parseRules(jp.DenyRules); err != nil {
		return nil, fmt.Errorf(`"deny_rules" %v`, err)
	}
	if p.allow, err = parseRules(jp.AllowRules); err != nil {
		return nil, fmt.Errorf(`"allow_rules" %v`, err)
	}
	return p, nil
}

// checkAudit accepts audit_logging_options that log nothing.
func checkAudit(raw json.RawMessage) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var o struct {
		AuditCondition string            `json:"audit_condition"`
		AuditLoggers   []json.RawMessage `json:"audit_loggers"`
	}
	if err := json.Unmarshal(raw, &o); err != nil {
		return fmt.Errorf(`"audit_logging_options": %v`, err)
	}
	switch o.AuditCondition {
	case "", "NONE", "ON_DENY", "ON_ALLOW", "ON_DENY_AND_ALLOW":
	default:
		return fmt.Errorf("failed to parse AuditCondition %v. Allowed values {NONE, ON_DENY, ON_ALLOW, ON_DENY_AND_ALLOW}", o.AuditCondition)
	}
	if len(o.AuditLoggers) > 0 {
		return errors.New(`"audit_logging_options": audit loggers are not supported by rdmarpc's authz`)
	}
	return nil
}

func parseRules(jrs []jsonRule) ([]rule, error) {
	rules := make([]rule, 0, len(jrs))
	for i, jr := range jrs {
		if jr.Name == "" {
			return nil, fmt.Errorf(`%d: "name" is not present`, i)
		}
		r := rule{name: jr.Name, principals: matchers(jr.Source.Principals), paths: matchers(jr.Request.Paths)}
		for j, h := range jr.Request.Headers {
			if h.Key == "" {
				return nil, fmt.Errorf(`%d: "headers" %d: "key" is not present`, i, j)
			}
			key := strings.ToLower(h.Key)
			if key[0] == ':' || strings.HasPrefix(key, "grpc-") || unsupportedHeaders[key] {
				return nil, fmt.Errorf(`%d: "headers" %d: unsupported "key" %s`, i, j, key)
			}
			if len(h.Values) == 0 {
				return nil, fmt.Errorf(`%d: "headers" %d: "values" is not present`, i, j)
			}
			r.headers = append(r.headers, headerMatcher{key: key, values: matchers(h.Values)})
		}
		rules = append(rules, r)
	}
	return rules, nil
}

// call is what a rule looks at.
type call struct {
	method string
	md     metadata.MD
	auth   credentials.AuthInfo
}

// allowed reports whether p lets c through.
func (p *policy) allowed(c *call) bool {
	for i := range p.deny {
		if p.deny[i].matches(c) {
			return false
		}
	}
	for i := range p.allow {
		if p.allow[i].matches(c) {
			return true
		}
	}
	return false
}

func (r *rule) matches(c *call) bool {
	if r.principals != nil && !principalMatches(r.principals, c.auth) {
		return false
	}
	if r.paths != nil && !anyMatch(r.paths, c.method) {
		return false
	}
	for _, h := range r.headers {
		vs := c.md.Get(h.key)
		if len(vs) == 0 || !anyMatch(h.values, strings.Join(vs, ",")) {
			return false
		}
	}
	return true
}

func anyMatch(ms []matcher, v string) bool {
	for _, m := range ms {
		if m.match(v) {
			return true
		}
	}
	return false
}

// principalMatches reports whether the peer's verified certificate has a
// principal one of ms matches: its URI SANs, else its DNS SANs, else its
// subject. A peer without a certificate has none.
func principalMatches(ms []matcher, auth credentials.AuthInfo) bool {
	ti, ok := auth.(credentials.TLSInfo)
	if !ok {
		return false // not authenticated
	}
	if len(ti.State.PeerCertificates) == 0 {
		return anyMatch(ms, "") // no certificate: the empty principal (gRFC A41)
	}
	cert := ti.State.PeerCertificates[0]
	for _, name := range principals(cert) {
		if anyMatch(ms, name) {
			return true
		}
	}
	return false
}

func principals(cert *x509.Certificate) []string {
	var names []string
	for _, u := range cert.URIs {
		names = append(names, u.String())
	}
	if len(names) > 0 {
		return names
	}
	if len(cert.DNSNames) > 0 {
		return cert.DNSNames
	}
	return []string{cert.Subject.String()}
}
