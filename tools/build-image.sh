#!/bin/bash
# Build the cyborg image (Containerfile: one image for cyborg-api,
# cyborg-conductor and cyborg-agent) with whichever builder is here:
# docker (when its daemon answers), podman or buildah.
#
#   tools/build-image.sh                        # FROM python:3.11-slim
#   tools/build-image.sh --make-base            # no registry: a Debian base
#                                               # made here with mmdebstrap
#   tools/build-image.sh --base IMAGE           # any base with python3 >= 3.11
#                                               # and pip
#   tools/build-image.sh --pip-cert /etc/ssl/certs/ca-certificates.crt
#                                               # pip behind a TLS-inspecting
#                                               # proxy (podman, buildah)
#   tools/build-image.sh -- --no-cache          # the rest goes to the builder
#
# Options:
#   --builder docker|podman|buildah   default: the first that works
#   --tag NAME                        default: localhost/cyborg:latest
#   --version V                       the package version (the build context
#                                     has no .git); default: pbr's, from git
#   --base IMAGE                      the FROM of both stages
#   --make-base                       make IMAGE (default
#                                     localhost/cyborg-base:bookworm) from
#                                     Debian's packages first (mmdebstrap, as
#                                     root), then build FROM it
#   --debian-mirror URL               for --make-base
#                                     (default http://deb.debian.org/debian)
#   --pip-cert FILE                   CA bundle for pip in the build
#   --pip-index-url URL               a PyPI mirror for pip in the build
#   --dry-run                         print the commands, run nothing
#
# podman and buildah run the RUN steps with --isolation chroot unless
# BUILDAH_ISOLATION says otherwise: it works inside an unprivileged
# container and without systemd, and the steps are this repository's own.
# See doc/source/deployment/kolla.rst.

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

builder=
tag=localhost/cyborg:latest
version=${CYBORG_VERSION:-}
base=
make_base=0
mirror=http://deb.debian.org/debian
pip_cert=
pip_index_url=
dry_run=0
extra=()

usage() {
    sed -n '2,/^$/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"
    exit "${1:-0}"
}

need_value() {
    if [[ $# -lt 2 || -z "$2" ]]; then
        echo "build-image.sh: $1 needs a value" >&2
        exit 2
    fi
}

while [[ $# -gt 0 ]]; do
    case "$1" in
        --builder) need_value "$@"; builder=$2; shift 2 ;;
        --tag) need_value "$@"; tag=$2; shift 2 ;;
        --version) need_value "$@"; version=$2; shift 2 ;;
        --base) need_value "$@"; base=$2; shift 2 ;;
        --make-base) make_base=1; shift ;;
        --debian-mirror) need_value "$@"; mirror=$2; shift 2 ;;
        --pip-cert) need_value "$@"; pip_cert=$2; shift 2 ;;
        --pip-index-url) need_value "$@"; pip_index_url=$2; shift 2 ;;
        --dry-run) dry_run=1; shift ;;
        -h|--help) usage 0 ;;
        --) shift; extra=("$@"); break ;;
        *) echo "build-image.sh: unknown option $1 (--help)" >&2; exit 2 ;;
    esac
done

run() {
    printf '%q ' "$@"
    echo
    if [[ $dry_run -eq 0 ]]; then
        "$@"
    fi
}

if [[ -z "$builder" ]]; then
    if command -v docker >/dev/null && docker info >/dev/null 2>&1; then
        builder=docker
    elif command -v podman >/dev/null; then
        builder=podman
    elif command -v buildah >/dev/null; then
        builder=buildah
    else
        echo "build-image.sh: no builder: install podman or buildah" \
             "(apt-get install buildah), or start docker's daemon" >&2
        exit 1
    fi
fi
case "$builder" in
    docker|podman|buildah) ;;
    *) echo "build-image.sh: --builder is docker, podman or buildah" >&2
       exit 2 ;;
esac
if [[ -n "$pip_cert" && "$builder" == docker ]]; then
    echo "build-image.sh: --pip-cert needs podman or buildah (docker" \
         "build mounts no files into RUN steps)" >&2
    exit 2
fi
if [[ -n "$pip_cert" && ! -r "$pip_cert" ]]; then
    echo "build-image.sh: --pip-cert $pip_cert: not a readable file" >&2
    exit 2
fi

if [[ -z "$version" ]]; then
    # pbr's version from git, as an installed checkout reports it.
    for python in "$ROOT/.venv/bin/python" python3; do
        if version=$(cd "$ROOT" && "$python" setup.py --version \
                     2>/dev/null | tail -n 1) && [[ -n "$version" ]]; then
            break
        fi
        version=
    done
    if [[ -z "$version" ]]; then
        echo "build-image.sh: pbr cannot tell the version here;" \
             "pass --version" >&2
        exit 2
    fi
fi

isolation=()
if [[ "$builder" != docker ]]; then
    isolation=(--isolation "${BUILDAH_ISOLATION:-chroot}")
fi

if [[ $make_base -eq 1 ]]; then
    base=${base:-localhost/cyborg-base:bookworm}
    if [[ $dry_run -eq 0 ]] && ! command -v mmdebstrap >/dev/null; then
        echo "build-image.sh: --make-base needs mmdebstrap" \
             "(apt-get install mmdebstrap)" >&2
        exit 1
    fi
    workdir=$(mktemp -d)
    trap 'rm -rf "$workdir"' EXIT
    # What python:3.11-slim gives the Containerfile: python3, pip that
    # installs into the system (Debian marks its python "externally
    # managed"; the image is its only user), CA certificates, useradd.
    # shellcheck disable=SC2016  # "$1" is mmdebstrap's, the root.
    run mmdebstrap --variant=minbase \
        --include=python3,python3-pip,ca-certificates \
        --customize-hook='rm -f "$1"/usr/lib/python3*/EXTERNALLY-MANAGED' \
        bookworm "$workdir/base.tar" "$mirror"
    case "$builder" in
        docker|podman)
            run "$builder" import --change 'ENV LANG=C.UTF-8' \
                --change 'CMD ["python3"]' "$workdir/base.tar" "$base" ;;
        buildah)
            if [[ $dry_run -eq 0 ]]; then
                container=$(buildah from scratch)
            else
                container=CONTAINER
            fi
            run buildah add "$container" "$workdir/base.tar" /
            run buildah config --env LANG=C.UTF-8 --cmd python3 "$container"
            run buildah commit --rm "$container" "$base" ;;
    esac
fi

args=(--build-arg "CYBORG_VERSION=$version" -t "$tag" -f Containerfile)
if [[ -n "$base" ]]; then
    args+=(--build-arg "BASE_IMAGE=$base")
fi
if [[ -n "$pip_cert" ]]; then
    args+=(-v "$(readlink -f "$pip_cert"):/run/cyborg-build/pip-cert.pem:ro"
           --build-arg PIP_CERT=/run/cyborg-build/pip-cert.pem)
fi
if [[ -n "$pip_index_url" ]]; then
    args+=(--build-arg "PIP_INDEX_URL=$pip_index_url")
fi

cd "$ROOT"
case "$builder" in
    docker|podman)
        run "$builder" build "${isolation[@]}" "${args[@]}" "${extra[@]}" . ;;
    buildah)
        run buildah bud "${isolation[@]}" --layers "${args[@]}" \
            "${extra[@]}" . ;;
esac
if [[ $dry_run -eq 0 ]]; then
    echo "built $tag (cyborg $version)"
fi
