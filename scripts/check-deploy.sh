#!/usr/bin/env bash
# Validates deploy/kubernetes/*.yaml with kubeconform (built from the Go
# module proxy by scripts/install-deps.sh) against strict schemas made from
# the OpenAPI document of Kubernetes itself (the k8s.io/kubernetes module,
# also fetched by install-deps), so nothing is pulled from outside here.
# Then proves the check can fail: a manifest with a misspelt field must be
# refused.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
K8S_VERSION=v1.37.2 # keep in step with scripts/install-deps.sh
kc=$(go env GOPATH)/bin/kubeconform
[ -x "$kc" ] || { echo "check-deploy: kubeconform missing: run make deps"; exit 1; }
spec=$(cd /tmp && GOFLAGS=-mod=mod GOWORK=off go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')/api/openapi-spec/swagger.json
[ -f "$spec" ] || { echo "check-deploy: $spec missing: run make deps"; exit 1; }
schemas=.cache/k8s-schemas
mkdir -p "$schemas"
kinds=$(sed -n 's/^kind: *//p' deploy/kubernetes/*.yaml | grep -v NetworkAttachmentDefinition | sort -u)
go run scripts/k8s-schemas.go -spec "$spec" -out "$schemas" $kinds
loc=(-schema-location "$schemas/{{ .ResourceKind }}{{ .KindSuffix }}.json"
     -schema-location "deploy/kubernetes/schemas/{{ .ResourceKind }}{{ .KindSuffix }}.json")
"$kc" -strict -summary "${loc[@]}" deploy/kubernetes/*.yaml
# The check must be able to fail: a misspelt field, a wrong type.
for bad in 's/terminationGracePeriodSeconds: 30/terminationGracePeriodSecond: 30/' 's/replicas: 1 /replicas: "one" /'; do
  if sed "$bad" deploy/kubernetes/kvserver.yaml | "$kc" -strict "${loc[@]}" - >/dev/null 2>&1; then
    echo "check-deploy: kubeconform accepted kvserver.yaml edited by '$bad'"; exit 1
  fi
done
echo "check-deploy: the manifests validate, and a misspelt or mistyped field is refused"
