#!/usr/bin/env bash
# The one test command (`make test`): every check, from a bare machine.
#   controller venv, then two lanes side by side:
#     e2e lane:   Docker engine + images -> the end-to-end run on the sandbox cluster (site.yml through
#                 ansible-runner, monitoring, a frozen rank, a resume, health.yml, Slurm with a killed rank)
#     check lane: ruff -> yamllint -> markdown -> ansible-lint -> ansible-test sanity -> syntax-check
#                 -> changelog lint -> pytest unit tests -> collection build/install/doc
#                 -> (the images, once the e2e lane has them) -> the molecule scenarios -> the watch soak
# The e2e lane is the longest and waits on apt, pip, compiles and training steps in its containers; the
# checks fill the CPU it leaves idle instead of running before it. Each stage prints its duration; the
# total is printed at the end. A lane stops at its first failure, and a failed check lane stops the e2e
# lane too.
# Run a subset with: scripts/test.sh lint unit
#   (stages: venv lint syntax unit collection integration, or molecule, e2e and soak one after the other;
#   all = venv, then the two lanes above, the default)
# Run chosen scenarios with: MOLECULE_SCENARIOS="rocm diagnose" scripts/test.sh molecule
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD

# shellcheck source=scripts/env.sh
source scripts/env.sh

stages=("$@")
[[ ${#stages[@]} -gt 0 ]] || stages=(all)

declare -a report=()
run_start=$SECONDS

stage() {
  local name=$1; shift
  local start=$SECONDS
  printf '\n===== %s =====\n' "$name"
  "$@"
  local took=$((SECONDS - start))
  report+=("$(printf '%-28s %5ss' "$name" "$took")")
  [[ -z ${STAGE_REPORT_FILE:-} ]] || printf '%-28s %5ss\n' "$name" "$took" >>"$STAGE_REPORT_FILE"
}

do_venv() { bash scripts/bootstrap-venv.sh; }

do_lint() {
  # An installed copy of this collection (left by an older molecule prerun) would shadow the
  # checkout for ansible-lint.
  local stale=$HOME/.ansible/collections/ansible_collections/instinct/finetune
  if [[ -f $stale/MANIFEST.json && ! -L $stale ]]; then
    echo "removing the stale installed copy $stale"
    rm -rf "$stale"
  fi
  # ansible-test sanity works on a staged copy under ansible_collections/instinct/finetune, from venvs
  # it builds (kept in ~/.ansible/test/venv): under a minute once they exist, about two the first
  # time, mostly one pylint process. It runs beside the other linters, which leave the checkout's
  # tracked files alone, and its log is printed when they are done.
  local sanity_log=$root/artifacts/test-logs/ansible-test-sanity.log sanity_start=$SECONDS
  mkdir -p "$(dirname "$sanity_log")"
  bash scripts/ansible-test-sanity.sh >"$sanity_log" 2>&1 &
  local sanity_pid=$!
  stage "ruff" ruff check .
  stage "ruff format" ruff format --check .
  stage "yamllint" yamllint --strict .
  stage "markdown" pymarkdown -c .pymarkdown.json scan README.md docs
  stage "ansible-lint (production)" ansible-lint --profile production --strict
  local sanity_rc=0
  wait "$sanity_pid" || sanity_rc=$?
  printf '\n===== ansible-test sanity (ran alongside the linters above) =====\n'
  cat "$sanity_log"
  report+=("$(printf '%-28s %5ss' "ansible-test sanity" "$((SECONDS - sanity_start))")")
  [[ -z ${STAGE_REPORT_FILE:-} ]] || printf '%s\n' "${report[-1]}" >>"$STAGE_REPORT_FILE"
  [[ $sanity_rc -eq 0 ]] || { echo "ansible-test sanity failed (exit $sanity_rc)"; return "$sanity_rc"; }
}

do_syntax() {
  local pb
  for pb in playbooks/*.yml; do
    ansible-playbook --syntax-check -i inventories/sandbox "$pb"
  done
}

do_changelog() { antsibull-changelog lint; }

do_unit() {
  local rc=0
  # The alert rule tests run Prometheus's own promtool (check rules, test rules), the receivers' test
  # Alertmanager's amtool (check-config).
  PROMTOOL=$(bash scripts/ensure-promtool.sh)
  AMTOOL=$(PROMTOOL_TOOL=amtool bash scripts/ensure-promtool.sh)
  # The finetune role's pre-launch check runs on the real LLaMA-Factory, transformers and DeepSpeed.
  INSTINCT_TRAIN_PYTHON=$(bash scripts/ensure-train-libs.sh)
  export PROMTOOL AMTOOL INSTINCT_TRAIN_PYTHON
  # node_tools/tests: the node tools package built into a wheel, installed with pip into throwaway
  # venvs (one over the training libraries above), and its console scripts run from there.
  pytest --durations=25 tests/unit node_tools/tests || rc=$?
  [[ $rc -eq 0 ]] || { echo "unit tests failed (pytest exit $rc)"; return "$rc"; }
}

do_collection() {
  # Build the tarball, install it into an empty path, and check that FQCNs resolve from there
  # (and only from there: the checkout's own link in .venv/collections is left out of the path).
  local tmp
  tmp=$(mktemp -d)
  ansible-galaxy collection build --force --output-path "$tmp/dist" .
  (
    export ANSIBLE_COLLECTIONS_PATH="$tmp/installed"
    cd "$tmp"
    ansible-galaxy collection install --offline --no-deps -p "$tmp/installed" dist/instinct-finetune-*.tar.gz
    ansible-galaxy collection list instinct.finetune | grep -E '^instinct\.finetune +0\.1\.0'
    # Printed from a variable: tee /dev/stderr would reopen a log file that stdout and stderr share,
    # truncating it.
    local listed
    listed=$(ansible-doc -l instinct.finetune)
    printf '%s\n' "$listed"
    grep -q 'instinct.finetune.rocminfo_facts' <<<"$listed"
    local path module
    for path in "$root"/plugins/modules/*.py; do
      module=$(basename "$path" .py)
      ansible-doc "instinct.finetune.$module" | grep -q 'EXAMPLES' || { echo "ansible-doc cannot read $module" >&2; return 1; }
    done
    ansible-doc -t filter -l instinct.finetune | grep -q 'instinct.finetune.supported_platform'
    ansible-doc -t role -l instinct.finetune | grep -q 'preflight'
    ansible -i localhost, -c local localhost -m ansible.builtin.debug \
      -a "msg={{ {'distribution': 'Ubuntu', 'distribution_version': '22.04'} | instinct.finetune.supported_platform([{'distribution': 'Ubuntu', 'version': '22.04', 'tier': 'primary'}]) }}" \
      | grep -q 'tier: primary'
  )
  rm -rf "$tmp"
}

# The Docker engine and the test images take minutes, mostly spent waiting on the package archive
# (debootstrap): when a later stage needs them they are made in the background while lint, syntax,
# unit and collection keep the CPUs busy, and the images stage then finds them made.
prebuild_pid=""
prebuild_images() {
  mkdir -p "$root/artifacts/test-logs"
  (
    bash scripts/ensure-docker.sh
    for variant in jammy jammy-systemd bookworm; do molecule/resources/images/build.sh "$variant" >/dev/null; done
  ) >"$root/artifacts/test-logs/images-prebuild.log" 2>&1 &
  prebuild_pid=$!
  echo "building the Docker engine and images in the background (artifacts/test-logs/images-prebuild.log)"
}

check_site_python() {
  if [[ -z $INSTINCT_SITE_PYTHON || ! -x $INSTINCT_SITE_PYTHON/bin/python3.11 ]]; then
    echo "the sandbox and the source-build scenario need a CPython 3.11 prefix in INSTINCT_SITE_PYTHON (got '$INSTINCT_SITE_PYTHON')" >&2
    return 1
  fi
}

do_images() {
  if [[ -n $prebuild_pid ]]; then
    # A failure here is reported by the builds below, which run again in the foreground.
    wait "$prebuild_pid" || echo "the background image build failed; building in the foreground"
    prebuild_pid=""
  fi
  check_site_python
  bash scripts/ensure-docker.sh
  INSTINCT_IMAGE_JAMMY=$(molecule/resources/images/build.sh jammy)
  INSTINCT_IMAGE_JAMMY_SYSTEMD=$(molecule/resources/images/build.sh jammy-systemd)
  INSTINCT_IMAGE_BOOKWORM=$(molecule/resources/images/build.sh bookworm)
  export INSTINCT_IMAGE_JAMMY INSTINCT_IMAGE_JAMMY_SYSTEMD INSTINCT_IMAGE_BOOKWORM
}

all_scenarios() {
  find molecule -mindepth 2 -maxdepth 2 -name molecule.yml -printf '%h\n' | xargs -n1 basename | sort
}

do_molecule() {
  local scenarios=${MOLECULE_SCENARIOS:-$(all_scenarios)}
  local s
  for s in $scenarios; do
    stage "molecule $s" molecule test -s "$s"
  done
}

do_soak() {
  # The job watch driven for 300 rounds through ansible-playbook, its memory against 30 rounds' (tests/soak,
  # about three minutes).
  local rc=0
  pytest -v -p no:cacheprovider tests/soak || rc=$?
  [[ $rc -eq 0 ]] || { echo "soak tests failed (pytest exit $rc)"; return "$rc"; }
}

do_e2e() {
  # The sandbox cluster end to end, through ansible-runner (tests/e2e, scripts/sandbox.py).
  local rc=0
  pytest -v -p no:cacheprovider --durations=15 tests/e2e || rc=$?
  [[ $rc -eq 0 ]] || { echo "end-to-end tests failed (pytest exit $rc)"; return "$rc"; }
}

do_integration() {
  # The sandbox cluster and the molecule scenarios share only the Docker engine (their networks,
  # ports and container names differ), and both spend much of their time waiting on apt, pip and
  # training steps: they run side by side, each lane in a subshell that stops at its first failure.
  # The e2e lane logs to a file, printed when both lanes are done.
  local logs=$root/artifacts/test-logs
  mkdir -p "$logs"
  : >"$logs/molecule-stages.txt"
  : >"$logs/e2e-stage.txt"
  (
    start=$SECONDS
    do_e2e
    printf '%-28s %5ss\n' "e2e sandbox (parallel)" "$((SECONDS - start))" >"$logs/e2e-stage.txt"
  ) >"$logs/e2e.log" 2>&1 &
  local e2e_pid=$!
  # The soak follows the scenarios in their lane, the shorter one.
  (
    # shellcheck disable=SC2030  # each lane's stages report to its own file, in its own subshell
    export STAGE_REPORT_FILE=$logs/molecule-stages.txt
    do_molecule
    stage "watch soak (300 rounds)" do_soak
  ) &
  local molecule_pid=$!
  # A cancelled run takes both lanes down with it.
  trap 'kill "$e2e_pid" "$molecule_pid" 2>/dev/null' INT TERM
  local rc=0 e2e_rc=0
  wait "$molecule_pid" || rc=$?
  wait "$e2e_pid" || e2e_rc=$?
  trap - INT TERM
  printf '\n===== e2e sandbox (ran alongside the molecule scenarios; %s) =====\n' "$logs/e2e.log"
  cat "$logs/e2e.log"
  mapfile -t -O "${#report[@]}" report <"$logs/molecule-stages.txt"
  mapfile -t -O "${#report[@]}" report <"$logs/e2e-stage.txt"
  [[ $rc -eq 0 ]] || { echo "molecule scenarios failed (exit $rc)"; return "$rc"; }
  [[ $e2e_rc -eq 0 ]] || { echo "end-to-end tests failed (exit $e2e_rc)"; return "$e2e_rc"; }
}

# Every process under a pid, children first (a lane's pytest, its ansible-runner and their children).
# ansible-runner takes SIGTERM as "cancel this playbook" and pytest then goes on with the next test:
# whatever is still there after ten seconds is killed.
tree_pids() {
  local child
  for child in $(pgrep -P "$1" 2>/dev/null); do tree_pids "$child"; done
  echo "$1"
}
kill_tree() {
  local pids waited=0
  pids=$(tree_pids "$1")
  # shellcheck disable=SC2086  # one pid per word
  kill $pids 2>/dev/null || true
  while ((waited < 10)) && ps -p "${pids//$'\n'/,}" >/dev/null 2>&1; do
    sleep 1
    waited=$((waited + 1))
  done
  # shellcheck disable=SC2086
  kill -KILL $pids 2>/dev/null || true
}

do_all() {
  local logs=$root/artifacts/test-logs
  mkdir -p "$logs"
  rm -f "$logs"/images-*.ready "$logs"/images-*.failed
  : >"$logs/check-stages.txt"
  : >"$logs/e2e-stage.txt"
  # The e2e lane: the engine, then the sandbox's image and the sandbox. The molecule scenarios' two
  # images are made beside it (debootstrap mostly waits on the archive); each image job leaves a marker
  # that the check lane waits for before its scenarios.
  (
    # However this lane ends before its image is made, the check lane must not wait for it.
    trap '[[ -f $logs/images-sandbox.ready ]] || touch "$logs/images-sandbox.failed"' EXIT
    start=$SECONDS
    check_site_python
    bash scripts/ensure-docker.sh
    (
      trap '[[ -f $logs/images-molecule.ready ]] || touch "$logs/images-molecule.failed"' EXIT
      for variant in jammy bookworm; do molecule/resources/images/build.sh "$variant" >/dev/null; done
      touch "$logs/images-molecule.ready"
    ) >"$logs/images-molecule.log" 2>&1 &
    INSTINCT_IMAGE_JAMMY_SYSTEMD=$(molecule/resources/images/build.sh jammy-systemd)
    export INSTINCT_IMAGE_JAMMY_SYSTEMD
    touch "$logs/images-sandbox.ready"
    printf '%-28s %5ss\n' "engine + sandbox image" "$((SECONDS - start))" >"$logs/e2e-stage.txt"
    start=$SECONDS
    do_e2e
    printf '%-28s %5ss\n' "e2e sandbox (e2e lane)" "$((SECONDS - start))" >>"$logs/e2e-stage.txt"
  ) >"$logs/e2e.log" 2>&1 &
  local e2e_pid=$!
  echo "the e2e lane runs in the background (Docker engine, images, then tests/e2e): $logs/e2e.log"
  # The check lane, in this terminal. The e2e lane is the longer one: the check lane's own processes
  # (linters, pytest, ansible-playbook) yield the CPUs to it and take what it leaves idle (its waits on
  # apt, pip and training steps). The scenarios' containers are Docker's children: the sandbox's nodes
  # have more CPU weight than they do (cpu_shares in molecule/resources/sandbox/up.yml).
  (
    renice -n 10 -p "$BASHPID" >/dev/null || true
    # shellcheck disable=SC2031  # each lane's stages report to its own file, in its own subshell
    export STAGE_REPORT_FILE=$logs/check-stages.txt
    do_lint
    stage "syntax-check" do_syntax
    stage "changelog lint" do_changelog
    stage "pytest unit" do_unit
    stage "collection build+install" do_collection
    stage "images (from e2e lane)" wait_for_images "$logs"
    do_molecule
    stage "watch soak (300 rounds)" do_soak
  ) &
  local check_pid=$!
  trap 'kill_tree "$e2e_pid"; kill_tree "$check_pid"' INT TERM
  local rc=0 e2e_rc=0
  wait "$check_pid" || rc=$?
  if [[ $rc -ne 0 ]]; then
    echo "the check lane failed (exit $rc): stopping the e2e lane"
    kill_tree "$e2e_pid"
  fi
  wait "$e2e_pid" || e2e_rc=$?
  trap - INT TERM
  printf '\n===== e2e lane (ran alongside the checks; %s) =====\n' "$logs/e2e.log"
  cat "$logs/e2e.log"
  mapfile -t -O "${#report[@]}" report <"$logs/check-stages.txt"
  mapfile -t -O "${#report[@]}" report <"$logs/e2e-stage.txt"
  [[ $rc -eq 0 ]] || { echo "the check lane failed (exit $rc)"; return "$rc"; }
  [[ $e2e_rc -eq 0 ]] || { echo "the e2e lane failed (exit $e2e_rc)"; return "$e2e_rc"; }
}

# The molecule scenarios need the images the e2e lane makes: wait for both markers (an hour at most),
# then take the images' names (reused, not built again).
wait_for_images() {
  local logs=$1 waited=0 image
  for image in sandbox molecule; do
    until [[ -f $logs/images-$image.ready ]]; do
      [[ ! -f $logs/images-$image.failed ]] || {
        echo "the e2e lane could not make the $image image(s) (see $logs/e2e.log, $logs/images-molecule.log)"
        return 1
      }
      ((waited < 3600)) || { echo "no $image image(s) after an hour (see $logs/e2e.log)"; return 1; }
      sleep 5
      waited=$((waited + 5))
    done
  done
  do_images
}

needs_images=false
for s in "${stages[@]}"; do
  [[ $s != integration && $s != molecule && $s != e2e ]] || needs_images=true
done

for s in "${stages[@]}"; do
  if [[ $needs_images == true && -z $prebuild_pid && $s != venv ]]; then
    needs_images=false
    [[ $s == integration || $s == molecule || $s == e2e ]] || prebuild_images
  fi
  case $s in
    venv) stage "controller venv" do_venv ;;
    lint) do_lint ;;
    syntax) stage "syntax-check" do_syntax; stage "changelog lint" do_changelog ;;
    unit) stage "pytest unit" do_unit ;;
    collection) stage "collection build+install" do_collection ;;
    molecule) stage "docker engine + images" do_images; do_molecule ;;
    e2e) stage "docker engine + images" do_images; stage "e2e sandbox" do_e2e ;;
    soak) stage "watch soak (300 rounds)" do_soak ;;
    integration) stage "docker engine + images" do_images; stage "integration" do_integration ;;
    all) stage "controller venv" do_venv; do_all ;;
    *) echo "unknown stage $s (all venv lint syntax unit collection integration molecule e2e soak)" >&2; exit 2 ;;
  esac
done

printf '\n===== summary =====\n'
printf '%s\n' "${report[@]}"
printf '%-28s %5ss\n' "TOTAL" "$((SECONDS - run_start))"
