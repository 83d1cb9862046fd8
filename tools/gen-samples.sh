#!/bin/sh
# Regenerate the committed samples: etc/cyborg/cyborg.conf.sample (every
# option cyborg reads) and etc/cyborg/policy.yaml.sample (every policy
# rule).  Run after adding an option or a rule; tests fail until you do.
set -eu
cd "$(dirname "$0")/.."
BIN="${VIRTUAL_ENV:-$PWD/.venv}/bin"
[ -x "$BIN/oslo-config-generator" ] || BIN="$(dirname "$(command -v oslo-config-generator)")"
# Options whose default depends on the machine (host name, paths) carry a
# sample_default, so the output is the same everywhere.
"$BIN/oslo-config-generator" \
    --config-file etc/cyborg/cyborg-config-generator.conf
"$BIN/oslopolicy-sample-generator" \
    --config-file etc/cyborg/cyborg-policy-generator.conf
echo "Wrote etc/cyborg/cyborg.conf.sample and etc/cyborg/policy.yaml.sample"
