package rpc

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/rdmarpc/rdmarpc/balancer"
	"github.com/rdmarpc/rdmarpc/balancer/pickfirst"
	"github.com/rdmarpc/rdmarpc/balancer/roundrobin"
	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/serviceconfig"
)

// serviceConfig is the part of gRPC's service config
// (https://github.com/grpc/grpc/blob/master/doc/service_config.md) that
// rdmarpc acts on: the balancer, per-method waitForReady, timeout and
// retry policy, the retry throttle and health checking. Other fields are ignored, as gRPC ignores
// fields it does not know.
type serviceConfig struct {
	policy     string           // the balancer's name: "pick_first", "round_robin", one registered
	balancer   balancer.Builder // policy's
	lbConfig   serviceconfig.LoadBalancingConfig
	methods    map[string]*methodConfig
	throttle   *throttleConfig
	health     bool
	healthName string // the service name health checks ask about
}

type methodConfig struct {
	waitForReady *bool
	timeout      time.Duration // 0: none
	retry        *retryPolicy
}

type retryPolicy struct {
	maxAttempts       int
	initialBackoff    time.Duration
	maxBackoff        time.Duration
	backoffMultiplier float64
	retryable         map[codes.Code]bool
}

type throttleConfig struct {
	maxTokens  float64
	tokenRatio float64
}

// The balancer policies the client registers (package balancer).
const (
	pickFirst  = pickfirst.Name
	roundRobin = roundrobin.Name
)

// defaultServiceConfig is the config without one: pick_first.
func defaultServiceConfig() *serviceConfig {
	return &serviceConfig{policy: pickFirst, balancer: balancer.Get(pickFirst)}
}

// maxRetryAttempts caps a policy's maxAttempts, as gRPC caps it at 5.
const maxRetryAttempts = 5

type jsonServiceConfig struct {
	LoadBalancingConfig []map[string]json.RawMessage `json:"loadBalancingConfig"`
	LoadBalancingPolicy string                       `json:"loadBalancingPolicy"`
	MethodConfig        []struct {
		Name []struct {
			Service string `json:"service"`
			Method  string `json:"method"`
		} `json:"name"`
		WaitForReady *bool   `json:"waitForReady"`
		Timeout      *string `json:"timeout"`
		RetryPolicy  *struct {
			MaxAttempts          int      `json:"maxAttempts"`
			InitialBackoff       string   `json:"initialBackoff"`
			MaxBackoff           string   `json:"maxBackoff"`
			BackoffMultiplier    float64  `json:"backoffMultiplier"`
			RetryableStatusCodes []string `json:"retryableStatusCodes"`
		} `json:"retryPolicy"`
	} `json:"methodConfig"`
	RetryThrottling *struct {
		MaxTokens  float64 `json:"maxTokens"`
		TokenRatio float64 `json:"tokenRatio"`
	} `json:"retryThrottling"`
	HealthCheckConfig *struct {
		ServiceName string `json:"serviceName"`
	} `json:"healthCheckConfig"`
}

// parseServiceConfig reads a service config in gRPC's JSON form.
func parseServiceConfig(s string) (*serviceConfig, error) {
	var j jsonServiceConfig
	if err := json.Unmarshal([]byte(s), &j); err != nil {
		return nil, fmt.Errorf("rpc: service config: %w", err)
	}
	sc := defaultServiceConfig()
	sc.methods = map[string]*methodConfig{}
	if j.LoadBalancingPolicy != "" {
		b := balancer.Get(j.LoadBalancingPolicy)
		if b == nil {
			return nil, fmt.Errorf("rpc: service config: unknown loadBalancingPolicy %q (none is registered by that name: balancer.Register)", j.LoadBalancingPolicy)
		}
		sc.policy, sc.balancer = b.Name(), b
	}
	if len(j.LoadBalancingConfig) > 0 {
		// The first policy of the list the client has wins, as in gRPC.
		var names []string
		found := false
		for _, m := range j.LoadBalancingConfig {
			if len(m) != 1 {
				return nil, fmt.Errorf("rpc: service config: a loadBalancingConfig entry names %d policies, want 1", len(m))
			}
			for name, raw := range m {
				names = append(names, name)
				b := balancer.Get(name)
				if found || b == nil {
					continue
				}
				sc.policy, sc.balancer, found = b.Name(), b, true
				if p, ok := b.(balancer.ConfigParser); ok {
					cfg, err := p.ParseConfig(raw)
					if err != nil {
						return nil, fmt.Errorf("rpc: service config: loadBalancingConfig %s: %w", name, err)
					}
					sc.lbConfig = cfg
				}
			}
		}
		if !found {
			return nil, fmt.Errorf("rpc: service config: no supported policy in loadBalancingConfig %q (none is registered by those names: balancer.Register)", names)
		}
	}
	for i, mc := range j.MethodConfig {
		m := &methodConfig{waitForReady: mc.WaitForReady}
		if mc.Timeout != nil {
			d, err := parseDuration("timeout", *mc.Timeout)
			if err != nil {
				return nil, fmt.Errorf("rpc: service config: methodConfig[%d]: %w", i, err)
			}
			m.timeout = d
		}
		if rp := mc.RetryPolicy; rp != nil {
			p, err := parseRetryPolicy(rp.MaxAttempts, rp.InitialBackoff, rp.MaxBackoff, rp.BackoffMultiplier, rp.RetryableStatusCodes)
			if err != nil {
				return nil, fmt.Errorf("rpc: service config: methodConfig[%d]: %w", i, err)
			}
			m.retry = p
		}
		for _, n := range mc.Name {
			if n.Service == "" && n.Method != "" {
				return nil, fmt.Errorf("rpc: service config: methodConfig[%d] names method %q without a service", i, n.Method)
			}
			// "/svc/m" for one method, "/svc/" for a service's, "" for all.
			key := ""
			if n.Service != "" {
				key = "/" + n.Service + "/" + n.Method
			}
			if _, dup := sc.methods[key]; dup {
				return nil, fmt.Errorf("rpc: service config: more than one methodConfig for %q", key)
			}
			sc.methods[key] = m
		}
	}
	if t := j.RetryThrottling; t != nil {
		if t.MaxTokens <= 0 || t.MaxTokens > 1000 || t.TokenRatio <= 0 {
			return nil, fmt.Errorf("rpc: service config: retryThrottling wants 0 < maxTokens <= 1000 and tokenRatio > 0, have %v and %v", t.MaxTokens, t.TokenRatio)
		}
		sc.throttle = &throttleConfig{maxTokens: t.MaxTokens, tokenRatio: t.TokenRatio}
	}
	if h := j.HealthCheckConfig; h != nil {
		sc.health, sc.healthName = true, h.ServiceName
	}
	return sc, nil
}

func parseRetryPolicy(attempts int, initial, maxB string, mult float64, codeNames []string) (*retryPolicy, error) {
	if attempts < 2 {
		return nil, fmt.Errorf("retryPolicy: maxAttempts %d, want at least 2", attempts)
	}
	p := &retryPolicy{maxAttempts: min(attempts, maxRetryAttempts), backoffMultiplier: mult, retryable: map[codes.Code]bool{}}
	var err error
	if p.initialBackoff, err = parseDuration("retryPolicy: initialBackoff", initial); err != nil {
		return nil, err
	}
	if p.maxBackoff, err = parseDuration("retryPolicy: maxBackoff", maxB); err != nil {
		return nil, err
	}
	if mult <= 0 {
		return nil, fmt.Errorf("retryPolicy: backoffMultiplier %v, want > 0", mult)
	}
	if len(codeNames) == 0 {
		return nil, fmt.Errorf("retryPolicy: no retryableStatusCodes")
	}
	for _, n := range codeNames {
		c, ok := codeByName(n)
		if !ok {
			return nil, fmt.Errorf("retryPolicy: unknown status code %q", n)
		}
		p.retryable[c] = true
	}
	return p, nil
}

// parseDuration reads the JSON form of a protobuf Duration ("0.1s"), which
// must be positive.
func parseDuration(field, s string) (time.Duration, error) {
	if !strings.HasSuffix(s, "s") {
		return 0, fmt.Errorf("%s %q, want seconds such as \"0.1s\"", field, s)
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s %q, want a positive duration such as \"0.1s\"", field, s)
	}
	return d, nil
}

// codeByName reads a status code written as gRPC's JSON does: its name in
// upper snake case ("UNAVAILABLE").
func codeByName(n string) (codes.Code, bool) {
	want := strings.ReplaceAll(strings.ToUpper(n), "_", "")
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		if strings.ToUpper(c.String()) == want {
			return c, true
		}
	}
	return 0, false
}

// method is the config of method ("/svc/m"): its own, else its service's,
// else the default one, else nil.
func (sc *serviceConfig) method(method string) *methodConfig {
	if sc == nil || len(sc.methods) == 0 {
		return nil
	}
	if m, ok := sc.methods[method]; ok {
		return m
	}
	if i := strings.LastIndexByte(method, '/'); i > 0 {
		if m, ok := sc.methods[method[:i+1]]; ok {
			return m
		}
	}
	return sc.methods[""]
}
