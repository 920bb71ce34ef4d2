#!/usr/bin/env bash
# `make ci-cold`: CI as a machine that has never seen the project runs it,
# as far as this machine allows. A warm machine hides missing install steps
# (an image built by an earlier run, a module in the cache, a tool under
# .tools/), so this run starts from none of them:
#
#   - a fresh clone of HEAD (committed work only) in a temporary directory,
#     so nothing untracked, no .tools/ and no build output comes along;
#   - every idem-local/* image removed (scripts/images.sh rebuilds them);
#   - dockerd stopped, so that .ci/run starts it as it must on a new machine
#     (started again afterwards if it was running before);
#   - the local PostgreSQL clusters stopped, for the same reason;
#   - an empty GOCACHE and a separate, empty GOMODCACHE for the run.
#
# Debian packages stay installed: removing them is beyond a script that
# runs on a developer's machine (.ci/run installs what is missing).
#
#   bash scripts/ci-cold.sh        (needs root, as .ci/run does)
#
# Prints the clone's .ci/run output and, last, the total time and result.
# The exit status is .ci/run's.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
start=$SECONDS
log() { printf '\n== ci-cold [%ds] %s\n' $((SECONDS - start)) "$*"; }

work=$(mktemp -d /tmp/idem-ci-cold.XXXXXX)
dockerd_was_running=false
# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
	# The module cache is read-only by design; make it removable.
	chmod -R u+w "$work" 2>/dev/null || true
	rm -rf "$work"
	if $dockerd_was_running && ! docker info >/dev/null 2>&1; then
		log "starting dockerd again (it ran before ci-cold)"
		(dockerd >/tmp/ci-cold-dockerd.log 2>&1 &)
		for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
	fi
}
trap cleanup EXIT

head=$(git -C "$top" rev-parse HEAD)
log "fresh clone of ${head:0:12} into $work/idem"
git clone -q --no-local --no-checkout "$top" "$work/idem"
git -C "$work/idem" checkout -q --detach "$head"

if docker info >/dev/null 2>&1; then
	dockerd_was_running=true
	mapfile -t images < <(docker images --format '{{.Repository}}:{{.Tag}}' | grep '^idem-local/' || true)
	if [ ${#images[@]} -gt 0 ]; then
		log "removing ${#images[@]} project image(s): ${images[*]}"
		docker rmi -f "${images[@]}" >/dev/null
	fi
	log "stopping dockerd"
	pid=$(cat /var/run/docker.pid 2>/dev/null || pgrep -x dockerd || true)
	if [ -n "$pid" ]; then
		kill "$pid"
		for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
	fi
	# containerd, when dockerd started its own, goes with it.
	if docker info >/dev/null 2>&1; then
		echo "ci-cold: dockerd is still answering; stop it by hand" >&2
		exit 1
	fi
fi

if command -v pg_lsclusters >/dev/null; then
	while read -r ver name _ status _; do
		if [ "$status" = online ]; then
			log "stopping PostgreSQL cluster $ver/$name"
			pg_ctlcluster "$ver" "$name" stop
		fi
	done < <(pg_lsclusters -h)
fi

mkdir "$work/gocache" "$work/gomodcache"
log "bash .ci/run (GOCACHE and GOMODCACHE empty, under $work)"
status=0
(
	cd "$work/idem"
	GOCACHE=$work/gocache GOMODCACHE=$work/gomodcache GOFLAGS=-modcacherw \
		bash .ci/run
) || status=$?
total=$((SECONDS - start))
if [ $status -eq 0 ]; then
	log "cold CI passed in $((total / 60))m$((total % 60))s"
else
	log "cold CI FAILED (exit $status) after $((total / 60))m$((total % 60))s"
fi
exit $status
