#!/usr/bin/env bash
# Validates the Grafana dashboards against Grafana's own dashboard schema:
# @grafana/schema (pinned in package.json/package-lock.json) holds its
# TypeScript types, ts-json-schema-generator turns the Dashboard type into a
# JSON Schema, ajv-cli validates every dashboard with it. A deliberately
# broken copy must fail, so the check itself is checked.
#   validate.sh WORK_DIR DASHBOARD_DIR
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=$1; DASHBOARDS=$2
mkdir -p "$WORK"
# A changed lock file means other pinned versions: start from scratch.
cmp -s "$HERE/package-lock.json" "$WORK/package-lock.json" || rm -rf "$WORK/node_modules"
cp "$HERE/package.json" "$HERE/package-lock.json" "$WORK/"
cd "$WORK"
if [ ! -d node_modules/@grafana/schema ] && ! npm ci --no-audit --no-fund --loglevel=error; then
  # Without the registry the schema cannot be had: skipped (77) with the
  # reason, never failed on the network and never passed without checking.
  registry=$(npm config get registry)
  if ! npm ping > /dev/null 2>&1; then
    echo "skipped: the npm registry ($registry) cannot be reached, so Grafana's schema cannot be installed"
    exit 77
  fi
  exit 1
fi
TYPES=node_modules/@grafana/schema/dist/esm/raw/dashboard/x/dashboard_types.gen.d.ts
npx --no-install ts-json-schema-generator --path "$TYPES" --type Dashboard --no-type-check -o dashboard.schema.json
status=0
for d in "$DASHBOARDS"/*.json; do
  npx --no-install ajv validate -s dashboard.schema.json -d "$d" --strict=false --all-errors || status=1
done
# The broken copy: a panel whose gridPos is a string.
python3 - "$DASHBOARDS"/trainbench.json broken.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); d["panels"][0]["gridPos"] = "wide"; json.dump(d, open(sys.argv[2], "w"))
PY
if npx --no-install ajv validate -s dashboard.schema.json -d broken.json --strict=false >/dev/null 2>&1; then
  echo "schema check accepted a broken dashboard: the check is not working"; status=1
fi
exit $status
