#!/usr/bin/env bash
# Builds the Kubernetes control-plane binaries the tests run against
# (kube-apiserver and etcd) and helm (to render GIE's Helm chart in the
# drop-in test) from the Go module proxy, once per version, and prints the
# folder that holds them: that folder is KUBEBUILDER_ASSETS for
# controller-runtime's envtest.
#
#   export KUBEBUILDER_ASSETS=$(hack/test-binaries.sh)
#
# Binaries are kept in bin/k8s/<version>-<os>-<arch>/ (git-ignored), so the
# cost (about 15 minutes on 2 cores with a cold module cache: kube-apiserver
# most of it, then helm and etcd) is paid once per machine. Progress goes
# to stderr; stdout carries only the folder.
set -euo pipefail
cd "$(dirname "$0")/.."

KUBE_VERSION=${KUBE_VERSION:-1.36.3}   # k8s.io/kubernetes; staging modules are v0.<minor>.<patch>
ETCD_VERSION=${ETCD_VERSION:-3.6.8}    # go.etcd.io/etcd/server/v3
HELM_VERSION=${HELM_VERSION:-3.19.0}   # helm.sh/helm/v3

GOOS=$(go env GOOS)
GOARCH=$(go env GOARCH)
root=$PWD
out="$root/bin/k8s/${KUBE_VERSION}-${GOOS}-${GOARCH}"
work="$root/.cache/test-binaries"

# have NAME VERSION: the binary is there, built at that version.
have() { [[ -x "$out/$1" && -f "$out/.$1.version" && "$(cat "$out/.$1.version")" == "$2" ]]; }
all_there() { have etcd "v$ETCD_VERSION" && have kube-apiserver "v$KUBE_VERSION" && have helm "v$HELM_VERSION"; }

if all_there; then
  echo "$out"
  exit 0
fi

mkdir -p "$out" "$work"
# One builder at a time: a second caller waits for the first and reuses its result.
exec 9>"$work/.lock"
flock 9
if all_there; then
  echo "$out"
  exit 0
fi

# The wrapper modules are built with their own go.mod files, whatever the
# caller's GOFLAGS say about tests.
export GOFLAGS="-buildvcs=false -mod=mod"
export GOWORK=off

minor=${KUBE_VERSION#*.}; minor=${minor%%.*}
staging="0.${KUBE_VERSION#*.}"
start=$SECONDS

if ! have etcd "v$ETCD_VERSION"; then
  echo ">> building etcd v${ETCD_VERSION} from the module proxy" >&2
  d="$work/etcd"
  rm -rf "$d" && mkdir -p "$d"
  cat >"$d/go.mod" <<MOD
module local/etcdbuild

go 1.26.0

require (
	go.etcd.io/etcd/api/v3 v${ETCD_VERSION}
	go.etcd.io/etcd/client/pkg/v3 v${ETCD_VERSION}
	go.etcd.io/etcd/client/v3 v${ETCD_VERSION}
	go.etcd.io/etcd/pkg/v3 v${ETCD_VERSION}
	go.etcd.io/etcd/server/v3 v${ETCD_VERSION}
)
MOD
  printf '//go:build tools\n\npackage tools\n\nimport _ "go.etcd.io/etcd/server/v3"\n' >"$d/tools.go"
  (cd "$d" && go mod tidy >&2 && go build -trimpath -ldflags="-s -w" -o "$out/etcd.tmp" go.etcd.io/etcd/server/v3 >&2)
  mv "$out/etcd.tmp" "$out/etcd"
  echo "v$ETCD_VERSION" >"$out/.etcd.version"
  echo ">> etcd built ($((SECONDS - start)) s so far)" >&2
fi

if ! have kube-apiserver "v$KUBE_VERSION"; then
  echo ">> building kube-apiserver v${KUBE_VERSION} from the module proxy (several minutes on a cold cache)" >&2
  d="$work/kube-apiserver"
  rm -rf "$d" && mkdir -p "$d"
  (cd "$d" && go mod download -json "k8s.io/kubernetes@v${KUBE_VERSION}" >/dev/null)
  mod="$(go env GOMODCACHE)/cache/download/k8s.io/kubernetes/@v/v${KUBE_VERSION}.mod"
  {
    printf 'module local/kapibuild\n\ngo 1.26.0\n\nrequire k8s.io/kubernetes v%s\n\nreplace (\n' "$KUBE_VERSION"
    # Every staging module kubernetes replaces with ./staging/... comes from the proxy at the matching version.
    sed -n '/^replace/,/^)/p' "$mod" | grep '=>' | awk -v v="v$staging" '{print "\t" $1 " => " $1 " " v}'
    printf ')\n'
  } >"$d/go.mod"
  printf '//go:build tools\n\npackage tools\n\nimport _ "k8s.io/kubernetes/cmd/kube-apiserver"\n' >"$d/tools.go"
  (cd "$d" && go mod tidy >&2 && go build -trimpath -o "$out/kube-apiserver.tmp" \
    -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=v${KUBE_VERSION} -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${minor}" \
    k8s.io/kubernetes/cmd/kube-apiserver >&2)
  mv "$out/kube-apiserver.tmp" "$out/kube-apiserver"
  echo "v$KUBE_VERSION" >"$out/.kube-apiserver.version"
  echo ">> kube-apiserver built ($((SECONDS - start)) s so far)" >&2
fi

if ! have helm "v$HELM_VERSION"; then
  echo ">> building helm v${HELM_VERSION} from the module proxy" >&2
  # helm's go.mod has no replace directives, so go install works as is.
  (cd "$work" && GOBIN="$work/helm-bin" go install -trimpath -ldflags="-s -w" "helm.sh/helm/v3/cmd/helm@v${HELM_VERSION}" >&2)
  mv "$work/helm-bin/helm" "$out/helm"
  echo "v$HELM_VERSION" >"$out/.helm.version"
  echo ">> helm built ($((SECONDS - start)) s so far)" >&2
fi

echo "$out"
