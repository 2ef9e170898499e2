package rpc

import (
	"testing"
	"time"

	"github.com/rdmarpc/rdmarpc/codes"
)

func TestParseServiceConfig(t *testing.T) {
	sc, err := parseServiceConfig(`{
		"loadBalancingConfig":[{"round_robin":{}}],
		"methodConfig":[
			{"name":[{"service":"kv.KV","method":"Get"}],"waitForReady":true,"timeout":"1.5s",
			 "retryPolicy":{"maxAttempts":9,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE","deadline_exceeded"]}},
			{"name":[{"service":"kv.KV"}]},
			{"name":[{}]}],
		"retryThrottling":{"maxTokens":10,"tokenRatio":0.1},
		"healthCheckConfig":{"serviceName":"kv"}}`)
	if err != nil {
		t.Fatal(err)
	}
	if sc.policy != roundRobin || !sc.health || sc.healthName != "kv" || sc.throttle == nil || sc.throttle.maxTokens != 10 {
		t.Fatalf("parsed %+v", sc)
	}
	get := sc.method("/kv.KV/Get")
	if get == nil || get.retry == nil || !*get.waitForReady || get.timeout != 1500*time.Millisecond {
		t.Fatalf("/kv.KV/Get: %+v", get)
	}
	p := get.retry
	if p.maxAttempts != 9 || p.initialBackoff != 100*time.Millisecond || p.maxBackoff != time.Second ||
		!p.retryable[codes.Unavailable] || !p.retryable[codes.DeadlineExceeded] || p.retryable[codes.Internal] {
		t.Fatalf("retry policy %+v", p)
	}
	if m := sc.method("/kv.KV/Put"); m == nil || m == get || m.retry != nil {
		t.Fatalf("/kv.KV/Put takes the service's config, got %+v", m)
	}
	if m := sc.method("/other.S/M"); m == nil || m == get || m == sc.method("/kv.KV/Put") {
		t.Fatalf("/other.S/M takes the default config, got %+v", m)
	}
	for n := 1; n <= 8; n++ {
		if d := p.delay(n); d < 0 || d >= time.Second {
			t.Fatalf("delay before attempt %d: %v, want in [0, maxBackoff)", n+1, d)
		}
	}
}

// FuzzParseServiceConfig: any input is a config or an error, never a
// panic; a config's retry policies are within gRPC's bounds.
func FuzzParseServiceConfig(f *testing.F) {
	f.Add(`{"loadBalancingConfig":[{"round_robin":{}}]}`)
	f.Add(`{"methodConfig":[{"name":[{"service":"s"}],"retryPolicy":{"maxAttempts":3,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}],"retryThrottling":{"maxTokens":10,"tokenRatio":0.1}}`)
	f.Add(`{"healthCheckConfig":{"serviceName":"x"},"loadBalancingPolicy":"pick_first"}`)
	f.Fuzz(func(t *testing.T, s string) {
		sc, err := parseServiceConfig(s)
		if err != nil {
			return
		}
		for _, m := range sc.methods {
			if p := m.retry; p != nil && (p.maxAttempts < 2 || p.initialBackoff <= 0 || p.maxBackoff <= 0 || p.backoffMultiplier <= 0) {
				t.Fatalf("policy out of bounds: %+v", p)
			}
		}
		if sc.policy != pickFirst && sc.policy != roundRobin {
			t.Fatalf("policy %q", sc.policy)
		}
	})
}
