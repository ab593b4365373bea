#!/usr/bin/env bash
# Build the local stand-in for GitHub's pytorch/pytorch repository (a test double, see README.md)
# into OUTDIR, ready to be served over HTTP by serve.sh:
#   OUTDIR/pytorch.git                 bare; annotated tags v2.10.0 and v2.10.1 (one commit each),
#                                      submodule third_party/stand_in -> ../stand-in-third-party.git
#   OUTDIR/stand-in-third-party.git    bare; two commits: v2.10.0 pins the first, v2.10.1 the second
#   OUTDIR/audio.git                   bare; annotated tag v2.10.0 (./audio-tree + version.txt), the
#                                      stand-in for GitHub's pytorch/audio
# The tree committed at each tag is ./tree plus version.txt (the tag's version) and .gitmodules.
# Usage: build.sh OUTDIR     (idempotent: rebuilt from scratch; fixed names and dates, so the
#                            commit ids are the same on every run and every machine)
# Prints "TAG COMMIT" for each tag.
set -euo pipefail

if [[ $# -ne 1 ]]; then
    echo "usage: $0 OUTDIR" >&2
    exit 2
fi
command -v git >/dev/null || { echo "build.sh: git is missing" >&2; exit 1; }

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mkdir -p "$1"
OUT=$(cd "$1" && pwd)
STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT

# No user or system git configuration (signing, hooks, default branch) leaks into the commits.
export GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1
export GIT_AUTHOR_NAME="instinct.finetune test double" GIT_AUTHOR_EMAIL=instinct-sim@invalid
export GIT_COMMITTER_NAME="$GIT_AUTHOR_NAME" GIT_COMMITTER_EMAIL="$GIT_AUTHOR_EMAIL"
commit() {  # commit REPO DATE MESSAGE  (the date is also the tagger date of a tag made next)
    export GIT_AUTHOR_DATE="$2 +0000" GIT_COMMITTER_DATE="$2 +0000"
    git -C "$1" commit --quiet --no-verify -m "$3"
}

# ---------------------------------------------------------------- the submodule
SUB=$STAGE/stand-in-third-party
git init --quiet --initial-branch=main "$SUB"
echo "stand-in third-party revision 1" > "$SUB/REVISION"
git -C "$SUB" add REVISION
commit "$SUB" "2025-10-01T00:00:00" "stand-in third-party revision 1"
SUB_REV1=$(git -C "$SUB" rev-parse HEAD)
echo "stand-in third-party revision 2" > "$SUB/REVISION"
git -C "$SUB" add REVISION
commit "$SUB" "2025-11-01T00:00:00" "stand-in third-party revision 2"
SUB_REV2=$(git -C "$SUB" rev-parse HEAD)

# ---------------------------------------------------------------- the superproject
SRC=$STAGE/pytorch
git init --quiet --initial-branch=main "$SRC"
(cd "$HERE/tree" && tar --exclude=__pycache__ --exclude=./build -cf - .) | tar -C "$SRC" -xf -
# A relative URL, as git resolves it against the superproject's own: the stand-in works at any address.
printf '[submodule "third_party/stand_in"]\n\tpath = third_party/stand_in\n\turl = ../stand-in-third-party.git\n' \
    > "$SRC/.gitmodules"
release() {  # release VERSION SUBMODULE_COMMIT DATE
    echo "$1" > "$SRC/version.txt"
    git -C "$SRC" add -A
    # the gitlink after "add -A" (which would drop it: the submodule folder is not checked out here)
    git -C "$SRC" update-index --add --cacheinfo "160000,$2,third_party/stand_in"
    commit "$SRC" "$3" "stand-in release $1"
    git -C "$SRC" tag --annotate "v$1" --message "stand-in for PyTorch v$1"
}
release 2.10.0 "$SUB_REV1" "2025-10-15T00:00:00"
release 2.10.1 "$SUB_REV2" "2025-11-15T00:00:00"

# ---------------------------------------------------------------- the torchaudio stand-in
AUDIO=$STAGE/audio
git init --quiet --initial-branch=main "$AUDIO"
(cd "$HERE/audio-tree" && tar --exclude=__pycache__ --exclude=./build -cf - .) | tar -C "$AUDIO" -xf -
echo "2.10.0" > "$AUDIO/version.txt"
git -C "$AUDIO" add -A
commit "$AUDIO" "2025-10-16T00:00:00" "stand-in torchaudio release 2.10.0"
git -C "$AUDIO" tag --annotate v2.10.0 --message "stand-in for torchaudio v2.10.0"

# ---------------------------------------------------------------- bare repositories to serve
for name in pytorch stand-in-third-party audio; do
    rm -rf "${OUT:?}/$name.git"
    git clone --quiet --bare "$STAGE/$name" "$OUT/$name.git"
    git -C "$OUT/$name.git" remote remove origin
    # GitHub lets clients fetch any commit reachable from a ref (submodules pinned below a branch tip)
    git -C "$OUT/$name.git" config uploadpack.allowReachableSHA1InWant true
    # for clients of the dumb protocol too
    git -C "$OUT/$name.git" update-server-info
done
for tag in v2.10.0 v2.10.1; do
    echo "$tag $(git -C "$OUT/pytorch.git" rev-parse "$tag^{commit}")"
done
echo "audio-v2.10.0 $(git -C "$OUT/audio.git" rev-parse "v2.10.0^{commit}")"
