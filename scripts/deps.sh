#!/bin/sh
# Install the Debian packages a make target needs, only those missing;
# with all of them present it exits at once without calling apt.
# Usage: scripts/deps.sh [--test|--ref|--fuzz|--bench]
#   (none)   what `make` needs to build the programs
#   --test   adds what `make test` runs: bats, the reference checkers'
#            numpy, nginx for ds-serve.bats' proxy test, mandoc, ...
#   --ref    adds what the PyTorch/SentencePiece reference generators
#            under scripts/ref/ need (the tests never need them)
#   --fuzz   adds clang with libFuzzer and OpenMP for `make fuzz`
#   --bench  adds SentencePiece, which `make bench` times ds-tok against
set -eu

# libopenmpi-dev: every build links MPI (libcore/dist/, ds-run --mpi);
# openmpi-bin (mpirun) runs the multi-rank jobs, and the tests of them.
pkgs="gcc make libc6-dev pkg-config zlib1g-dev libarchive-dev libjansson-dev
libnuma-dev libpcre2-dev libmicrohttpd-dev libzstd-dev libicu-dev
libopenmpi-dev openmpi-bin"
test_pkgs="bats mandoc curl python3 python3-numpy zstd time nginx
python3-prometheus-client python3-jinja2"
case "${1:-}" in
--test|--bench|--ref) pkgs="$pkgs $test_pkgs" ;;
esac
[ "${1:-}" = "--ref" ] && pkgs="$pkgs python3-torch python3-sentencepiece"
# scripts/train-demo.py: the training text (Jane Austen, public domain; MIT
# package), the loss plot, and a BLAS that is 7x faster than reference BLAS
[ "${1:-}" = "--ref" ] && pkgs="$pkgs r-cran-janeaustenr python3-matplotlib libopenblas0-pthread"
# make fuzz: libFuzzer ships in clang's runtime package; -fopenmp needs libomp
[ "${1:-}" = "--fuzz" ] && pkgs="$pkgs clang libclang-rt-14-dev libomp-dev"
[ "${1:-}" = "--bench" ] && pkgs="$pkgs python3-sentencepiece"

missing=""
for p in $pkgs; do
	st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
	case "$st" in
	*"install ok installed"*) ;;
	*) missing="$missing $p" ;;
	esac
done
[ -z "$missing" ] && exit 0

echo "deps.sh: installing:$missing" >&2
sudo=""
if [ "$(id -u)" != 0 ]; then
	command -v sudo >/dev/null 2>&1 || {
		echo "deps.sh: need root or sudo to install:$missing" >&2
		exit 1
	}
	sudo=sudo
fi
export DEBIAN_FRONTEND=noninteractive
# nginx is for tests/cli/ds-serve.bats, which runs its own on loopback: its
# package must not start the system's web server (policy-rc.d says no).
case " $missing " in *" nginx "*)
	if [ ! -e /usr/sbin/policy-rc.d ]; then
		printf '#!/bin/sh\nexit 101\n' | $sudo tee /usr/sbin/policy-rc.d >/dev/null
		$sudo chmod 755 /usr/sbin/policy-rc.d
		trap '$sudo rm -f /usr/sbin/policy-rc.d' EXIT
	fi ;;
esac
$sudo apt-get update -qq
# shellcheck disable=SC2086
$sudo apt-get install -y -qq --no-install-recommends $missing >&2
