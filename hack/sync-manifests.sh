#!/usr/bin/env bash
# Refreshes the copies the kustomize base ships (kustomize reads no file
# outside its folder), which manifests' tests compare with their sources:
#   manifests/base/crds/*.yaml          <- config/crd/bases/*.yaml of the
#                                          sigs.k8s.io/gateway-api-inference-extension
#                                          module at the version go.mod requires,
#                                          and the InferenceObjective CRD of its
#                                          v1.5.0 (the last version shipping it)
#   manifests/base/config/default.yaml  <- config/default.yaml
# The module comes from the Go module proxy (through the module cache); the
# download runs in a temporary module, so go.mod and go.sum stay untouched.
set -euo pipefail
cd "$(dirname "$0")/.."

module=sigs.k8s.io/gateway-api-inference-extension
version=$(awk -v m="$module" '$1 == m { print $2; exit } $1 == "require" && $2 == m { print $3; exit }' go.mod)
if [[ -z "$version" ]]; then
  echo "go.mod does not require $module" >&2
  exit 1
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf 'module sync-manifests\n\ngo 1.26\n' >"$tmp/go.mod"
dir=$(cd "$tmp" && GOWORK=off GOFLAGS=-mod=mod go mod download -json "$module@$version" |
  sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
if [[ -z "$dir" || ! -d "$dir/config/crd/bases" ]]; then
  echo "could not download $module@$version" >&2
  exit 1
fi

dst=manifests/base/crds
find "$dst" -maxdepth 1 -name '*.yaml' ! -name kustomization.yaml -delete
for f in "$dir"/config/crd/bases/*.yaml; do
  install -m 0644 "$f" "$dst/$(basename "$f")"
  echo "$dst/$(basename "$f") <- $module@$version config/crd/bases/$(basename "$f")"
done
# The InferenceObjective CRD (inference.networking.x-k8s.io/v1alpha2) left
# GIE's module after v1.5.0; the EPP still reads its objects.
obj=inference.networking.x-k8s.io_inferenceobjectives.yaml
if [[ ! -f "$dst/$obj" ]]; then
  old=$(cd "$tmp" && GOWORK=off GOFLAGS=-mod=mod go mod download -json "$module@v1.5.0" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  install -m 0644 "$old/config/crd/bases/$obj" "$dst/$obj"
  echo "$dst/$obj <- $module@v1.5.0 config/crd/bases/$obj"
fi
install -m 0644 config/default.yaml manifests/base/config/default.yaml
echo "manifests/base/config/default.yaml <- config/default.yaml"
echo "check that $dst/kustomization.yaml lists every CRD file, then: go test ./manifests/" >&2
