#!/bin/sh
# Install the Debian packages a make target needs, only those missing;
# with all of them present it exits at once without calling apt.
# Usage: scripts/deps.sh [--test|--ref|--fuzz|--bench|--arm64]
#   (none)   what `make` needs to build the programs
#   --test   adds what `make test` runs: bats, the reference checkers'
#            numpy, nginx for ds-serve.bats' proxy test, mandoc, ...
#   --ref    adds what the PyTorch/SentencePiece reference generators
#            under scripts/ref/ need (the tests never need them)
#   --fuzz   adds clang with libFuzzer and OpenMP for `make fuzz`
#   --bench  adds SentencePiece, which `make bench` times ds-tok against
#   --arm64  adds what `make arm64` and `make test-arm64` need: Debian's
#            aarch64 cross compiler, qemu-user, and the arm64 builds of
#            the libraries ds links (multiarch: beside the amd64 ones)
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
# make arm64: the libraries' -dev packages of both architectures are
# Multi-Arch: same (co-installable); the cross gcc finds the arm64 ones in
# /usr/lib/aarch64-linux-gnu, qemu-aarch64 runs the programs and tests
# with the multiarch loader and libraries (libc6:arm64, which the -dev
# packages bring, and libgomp1:arm64: the cross toolchain's own copies
# are only for linking); make test-arm64 also runs the golden-logit
# checks (python3-numpy)
arm64_pkgs="gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user python3-numpy libgomp1:arm64
zlib1g-dev:arm64 libarchive-dev:arm64 libjansson-dev:arm64 libnuma-dev:arm64
libpcre2-dev:arm64 libmicrohttpd-dev:arm64 libzstd-dev:arm64 libicu-dev:arm64"
[ "${1:-}" = "--arm64" ] && pkgs="$pkgs $arm64_pkgs"

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
# the arm64 packages come from the same archive once dpkg knows the
# architecture (the update below then fetches its package lists)
case " $missing " in *":arm64 "*)
	dpkg --print-foreign-architectures | grep -qx arm64 ||
		$sudo dpkg --add-architecture arm64 ;;
esac
$sudo apt-get update -qq
# shellcheck disable=SC2086
$sudo apt-get install -y -qq --no-install-recommends $missing >&2
