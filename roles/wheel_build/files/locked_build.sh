# shellcheck shell=bash
# Runs a wheel build at most once per wheel folder, however many runs start it (bash -c, no shebang:
# the role passes this text to bash). A second run of the play (an operator re-running site.yml while
# the first run's build still goes on in the background, its SSH session dropped) takes the folder's
# lock after the running build and finds its wheel instead of building into the same folder at once.
# The sha256 of each wheel the build leaves is recorded in OUT_DIR/SHA256SUMS as soon as the build ends
# (issue 32): every node installs and fetches against that record, never against what the folder
# holds later. A wheel without a record (an earlier release's, or one put there since) is no build:
# it is removed and the build runs.
# Arguments: OUT_DIR WHEEL_PREFIX LOG SCRIPT WAIT_SECONDS
set -euo pipefail
out=$1 prefix=$2 log=$3 script=$4 wait=$5

exec 9>"$out/.build.lock"
if ! flock --exclusive --wait "$wait" 9; then
    # On stdout: the role's failure message shows the job's output.
    echo "wheel_build: another build of $out still holds its lock after ${wait} s"
    exit 1
fi
built=$(compgen -G "$out/$prefix*.whl" || true)
if [[ -n $built && -s $out/SHA256SUMS ]]; then
    echo "wheel_build: $built was built by a run that held the lock before this one; nothing to build"
    exit 0
fi
if [[ -n $built ]]; then
    echo "wheel_build: $built has no sha256 recorded at its build; building again"
    rm -f -- "$out/$prefix"*.whl
fi
rm -f -- "$out/SHA256SUMS"
# A log an earlier release's builds left belongs to the training account: tee could not open it, and
# with pipefail a build that succeeded would fail. The log folder is this account's: the old log goes.
rm -f -- "$log"
# The build does not inherit the lock's descriptor: a process it leaves behind must not hold the lock.
WHEEL_BUILD_OUT=$out "$script" 9>&- 2>&1 | tee "$log"
# The record, written once the build has succeeded (pipefail ended the script otherwise), and renamed
# into place so that a reader never sees half of it.
cd "$out"
sha256sum -- "$prefix"*.whl > SHA256SUMS.partial
mv -f -- SHA256SUMS.partial SHA256SUMS
