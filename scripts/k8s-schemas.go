//go:build ignore

// k8s-schemas writes JSON schemas that kubeconform validates manifests with,
// made from Kubernetes' own OpenAPI document (api/openapi-spec/swagger.json
// of the k8s.io/kubernetes module, fetched from the Go module proxy), so
// that scripts/check-deploy.sh needs nothing from outside at test time.
//
//	go run scripts/k8s-schemas.go -spec swagger.json -out DIR [Kind ...]
//
// For each kind named (every kind when none is), it writes
// DIR/<kind>-<group>-<version>.json (core kinds: <kind>-<version>.json), the
// names kubeconform's {{ .ResourceKind }}{{ .KindSuffix }} template asks
// for. Each holds the kind's definition and every definition it refers to.
// The schemas are strict: an object with declared properties takes no
// others, so a misspelt field fails. Quantities and int-or-string fields
// accept the numbers YAML writes for them.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

func main() {
	spec := flag.String("spec", "", "Kubernetes' swagger.json")
	out := flag.String("out", "", "directory to write the schemas to")
	flag.Parse()
	if *spec == "" || *out == "" {
		log.Fatal("usage: k8s-schemas -spec swagger.json -out DIR [Kind ...]")
	}
	raw, err := os.ReadFile(*spec)
	if err != nil {
		log.Fatal(err)
	}
	var doc struct {
		Definitions map[string]map[string]any `json:"definitions"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		log.Fatalf("%s: %v", *spec, err)
	}
	want := map[string]bool{}
	for _, k := range flag.Args() {
		want[strings.ToLower(k)] = true
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		log.Fatal(err)
	}
	names := make([]string, 0, len(doc.Definitions))
	for n := range doc.Definitions {
		names = append(names, n)
	}
	sort.Strings(names)
	written := 0
	for _, name := range names {
		for _, gvk := range kinds(doc.Definitions[name]) {
			kind := strings.ToLower(gvk.Kind)
			if len(want) > 0 && !want[kind] {
				continue
			}
			file := kind
			if gvk.Group != "" {
				file += "-" + strings.ToLower(strings.Split(gvk.Group, ".")[0])
			}
			file += "-" + strings.ToLower(gvk.Version) + ".json"
			defs := map[string]any{}
			closure(doc.Definitions, name, defs)
			schema := map[string]any{"$ref": "#/definitions/" + name, "definitions": defs}
			b, err := json.Marshal(schema)
			if err != nil {
				log.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(*out, file), b, 0o644); err != nil {
				log.Fatal(err)
			}
			written++
		}
	}
	if written == 0 {
		log.Fatalf("no kind of %v in %s", flag.Args(), *spec)
	}
	fmt.Printf("k8s-schemas: %d schemas in %s\n", written, *out)
}

type gvk struct{ Group, Version, Kind string }

// kinds are the group/version/kinds a definition is the schema of.
func kinds(def map[string]any) []gvk {
	list, _ := def["x-kubernetes-group-version-kind"].([]any)
	var out []gvk
	for _, e := range list {
		m, _ := e.(map[string]any)
		g, _ := m["group"].(string)
		v, _ := m["version"].(string)
		k, _ := m["kind"].(string)
		if v != "" && k != "" {
			out = append(out, gvk{g, v, k})
		}
	}
	return out
}

// closure copies the definition name, made strict, and every definition it
// refers to into defs.
func closure(all map[string]map[string]any, name string, defs map[string]any) {
	if _, done := defs[name]; done {
		return
	}
	def, ok := all[name]
	if !ok {
		log.Fatalf("definition %s is referred to but missing", name)
	}
	defs[name] = nil // cycles stop here
	defs[name] = strict(def, name, func(ref string) { closure(all, ref, defs) })
}

// strict returns a copy of the schema s with additionalProperties false on
// every object that declares properties, numbers allowed where Kubernetes
// takes a quantity or an int-or-string, and each definition it refers to
// reported to ref.
func strict(s map[string]any, name string, ref func(string)) map[string]any {
	if strings.HasSuffix(name, ".api.resource.Quantity") || s["format"] == "int-or-string" {
		return map[string]any{"oneOf": []any{map[string]any{"type": "string"}, map[string]any{"type": "number"}}}
	}
	out := map[string]any{}
	for k, v := range s {
		switch k {
		case "$ref":
			r, _ := v.(string)
			ref(strings.TrimPrefix(r, "#/definitions/"))
			out[k] = v
		case "properties":
			props := map[string]any{}
			for p, ps := range v.(map[string]any) {
				props[p] = strict(ps.(map[string]any), "", ref)
			}
			out[k] = props
		case "items", "additionalProperties":
			if m, ok := v.(map[string]any); ok {
				out[k] = strict(m, "", ref)
			} else {
				out[k] = v
			}
		case "allOf", "anyOf", "oneOf":
			var list []any
			for _, e := range v.([]any) {
				list = append(list, strict(e.(map[string]any), "", ref))
			}
			out[k] = list
		default:
			out[k] = v
		}
	}
	if _, ok := s["properties"]; ok && s["additionalProperties"] == nil && s["x-kubernetes-preserve-unknown-fields"] != true {
		out["additionalProperties"] = false
	}
	return out
}
