package serviceconfig

// LoadBalancingConfig is one balancer's parsed configuration: the value of
// its entry in the service config's loadBalancingConfig list, as its
// balancer.ConfigParser read it. Implementations embed it, as in gRPC-go:
//
//	type weightedConfig struct {
//		serviceconfig.LoadBalancingConfig
//		Weights map[string]int `json:"weights"`
//	}
type LoadBalancingConfig interface {
	isLoadBalancingConfig()
}
