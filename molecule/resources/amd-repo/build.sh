#!/usr/bin/env bash
# Build the simulated AMD apt repositories (ROCm, amdgpu, graphics) of every simulated release and
# the simulated node's kernel repository into OUTDIR, signed with a key generated for the test.
# Releases (build_release below): ROCm 7.0.2 + amdgpu 30.10.2, ROCm 7.1.0 + amdgpu 30.20.
# Usage: build.sh OUTDIR          (idempotent: keys are kept, repositories are rebuilt)
# Env:   INSTINCT_SIM_KERNEL      kernel release the stub headers/modules are for (default: uname -r)
# See README.md next to this file for the layout and where every version comes from.
set -euo pipefail

if [[ $# -ne 1 ]]; then
    echo "usage: $0 OUTDIR" >&2
    exit 2
fi
for tool in gpg dpkg-deb apt-ftparchive gzip; do
    command -v "$tool" >/dev/null || { echo "build.sh: $tool is missing (apt-get install gnupg dpkg apt-utils)" >&2; exit 1; }
done

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
FIX=$ROOT/tests/fixtures
mkdir -p "$1"
OUT=$(cd "$1" && pwd)

SUITE=jammy
DISTVER=22.04
KVER=${INSTINCT_SIM_KERNEL:-$(uname -r)}

SIM_VERSION=1.2.0
MAINT="instinct.finetune test double <instinct-sim@invalid>"

umask 022
STAGE=$OUT/.stage
rm -rf "$STAGE" "$OUT/rocm/apt" "$OUT/amdgpu" "$OUT/graphics" "$OUT/kernel"
mkdir -p "$STAGE"

# ---------------------------------------------------------------- keys (kept between runs)
export GPG_TTY=
genkey() {  # genkey GNUPGHOME UID
    local home=$1 uid=$2
    mkdir -p "$home"
    chmod 700 "$home"
    if ! GNUPGHOME=$home gpg --batch --list-secret-keys "$uid" >/dev/null 2>&1; then
        GNUPGHOME=$home gpg --batch --quiet --passphrase '' --quick-gen-key "$uid" ed25519 sign never
    fi
}
KEY_UID="instinct-sim test repository signing key <instinct-sim@invalid>"
WRONG_UID="instinct-sim unrelated key <instinct-sim-wrong@invalid>"
genkey "$OUT/.gnupg" "$KEY_UID"
genkey "$OUT/.gnupg-wrong" "$WRONG_UID"
mkdir -p "$OUT/rocm" "$OUT/wrong"
GNUPGHOME=$OUT/.gnupg gpg --batch --armor --export "$KEY_UID" > "$OUT/rocm/rocm.gpg.key"
GNUPGHOME=$OUT/.gnupg-wrong gpg --batch --armor --export "$WRONG_UID" > "$OUT/wrong/rocm.gpg.key"
# The keyring a node set up the way AMD's install guide says holds: the key dearmored
# (`wget -O - .../rocm.gpg.key | gpg --dearmor > /etc/apt/keyrings/rocm.gpg`), done here because the
# node image has no gpg (molecule/rocm_negative, instinct-neg-amdway).
GNUPGHOME=$OUT/.gnupg gpg --batch --dearmor < "$OUT/rocm/rocm.gpg.key" > "$OUT/rocm/rocm.gpg"

# ---------------------------------------------------------------- package helpers
# mkpkg NAME VERSION ARCH DEPENDS DESCRIPTION  -> staging root in $PKGROOT; files go under it
mkpkg() {
    PKG_NAME=$1 PKG_VERSION=$2 PKG_ARCH=$3 PKG_DEPENDS=$4 PKG_DESC=$5
    PKGROOT=$STAGE/$PKG_NAME
    rm -rf "$PKGROOT"
    mkdir -p "$PKGROOT/DEBIAN"
}
# finish POOLROOT: write control, build the .deb into POOLROOT/pool/main/<l>/<name>/
finish() {
    local poolroot=$1 dir deb
    {
        echo "Package: $PKG_NAME"
        echo "Version: $PKG_VERSION"
        echo "Architecture: $PKG_ARCH"
        echo "Maintainer: $MAINT"
        [[ -n $PKG_DEPENDS ]] && echo "Depends: $PKG_DEPENDS"
        echo "Section: devel"
        echo "Priority: optional"
        echo "Description: $PKG_DESC"
        echo " Test double of the instinct.finetune collection (molecule/resources/amd-repo)."
        echo " It carries AMD's package name and version format but none of AMD's files."
    } > "$PKGROOT/DEBIAN/control"
    for s in postinst prerm postrm; do
        [[ -f $PKGROOT/DEBIAN/$s ]] && chmod 755 "$PKGROOT/DEBIAN/$s"
    done
    dir=$poolroot/pool/main/${PKG_NAME:0:1}/$PKG_NAME
    mkdir -p "$dir"
    deb=$dir/${PKG_NAME}_${PKG_VERSION#*:}_${PKG_ARCH}.deb
    dpkg-deb --root-owner-group -Zgzip --build "$PKGROOT" "$deb" >/dev/null
}
# wrapper TOOL PATH: a binary that prints the profile's recording for TOOL
wrapper() {
    mkdir -p "$(dirname "$PKGROOT$2")"
    printf '#!/bin/sh\n# instinct-sim: recorded real %s output of the active profile\nexec /usr/lib/instinct-sim/replay %s "$@"\n' "$1" "$1" > "$PKGROOT$2"
    chmod 755 "$PKGROOT$2"
}
placeholder() {  # placeholder PATH...
    local p
    for p in "$@"; do mkdir -p "$(dirname "$PKGROOT$p")"; : > "$PKGROOT$p"; done
}

# ---------------------------------------------------------------- instinct-sim-profiles
# Recordings are copied from tests/fixtures (never edited). Key = TOOL or TOOL_ARG1_ARG2...
mkpkg instinct-sim-profiles "$SIM_VERSION" all "pciutils" "simulated AMD Instinct node: recorded tool outputs and PCI view"
install -D -m 755 "$HERE/files/replay" "$PKGROOT/usr/lib/instinct-sim/replay"
install -D -m 755 "$HERE/files/lspci" "$PKGROOT/usr/local/bin/lspci"
P=$PKGROOT/usr/share/instinct-sim/profiles
rec() {  # rec PROFILE KEY FIXTURE [RC]
    mkdir -p "$P/$1"
    cp "$FIX/$3" "$P/$1/$2.txt"
    [[ -n ${4:-} ]] && echo "$4" > "$P/$1/$2.rc"
    return 0
}
norec() {  # norec PROFILE KEY RC MESSAGE  (no real recording exists: fail loudly, never invent)
    mkdir -p "$P/$1"
    echo "$4" > "$P/$1/$2.err"
    echo "$3" > "$P/$1/$2.rc"
}
LSPCI_KEY=lspci_-d_1002:74a1_-PP
# mi300x-8gpu (default)
rec mi300x-8gpu rocminfo rocminfo/mi300x-8gpu.txt
rec mi300x-8gpu rocminfo_--support rocminfo/mi300x-8gpu.txt
rec mi300x-8gpu amd-smi_static_--json smi/amdsmi-static-mi300x-8gpu.json
norec mi300x-8gpu amd-smi_metric_--json 1 "instinct-sim: no real recording of 'amd-smi metric --json' from an MI300X node exists (tests/fixtures/smi/SOURCES.md); this simulated amd-smi fails instead of inventing one"
norec mi300x-8gpu amd-smi_topology_--json 1 "instinct-sim: no real recording of 'amd-smi topology --json' from an MI300X node exists (tests/fixtures/smi/SOURCES.md); this simulated amd-smi fails instead of inventing one"
rec mi300x-8gpu rocm-smi_--showtopo smi/rocmsmi-showtopo-8gpu-xgmi.txt
# The only live readings of an 8x MI300X node (one machine, one doc): the concise table and the
# busy/VRAM view. The GPU collector falls back to them after amd-smi metric (no recording: fails).
rec mi300x-8gpu rocm-smi smi/rocmsmi-concise-8gpu.txt
rec mi300x-8gpu rocm-smi_-u_--showmeminfo_vram smi/rocmsmi-use-meminfo-vram-8gpu.txt
rec mi300x-8gpu "$LSPCI_KEY" lspci/mi300x-8gpu-d-1002-74a1-PP.txt
# mi300x-vf-1gpu: one MI300X VF of an 8-GPU host (ROCm/ROCm#5231): the concise table lists one GPU.
# tests/e2e switches a node to it mid-run, as a node whose GPUs but one fell out of the driver (the
# GPU-missing alert); no other view of that machine was recorded, so the other tools fail.
rec mi300x-vf-1gpu rocm-smi smi/rocmsmi-concise-1gpu-mi300xvf.txt
norec mi300x-vf-1gpu rocm-smi_-u_--showmeminfo_vram 1 "instinct-sim: no real recording of 'rocm-smi -u --showmeminfo vram' from the 1-GPU MI300X VF of ROCm/ROCm#5231 exists (tests/fixtures/smi/SOURCES.md)"
# driver-not-loaded: the GPUs are on the PCI bus, the kernel driver is not loaded
rec driver-not-loaded rocminfo rocminfo/fail-rock-not-loaded.txt 1
rec driver-not-loaded rocminfo_--support rocminfo/fail-rock-not-loaded.txt 1
rec driver-not-loaded "$LSPCI_KEY" lspci/mi300x-8gpu-d-1002-74a1-PP.txt
# kfd-permission: driver loaded, /dev/kfd not accessible to the user
rec kfd-permission rocminfo rocminfo/fail-kfd-permission.txt 1
rec kfd-permission rocminfo_--support rocminfo/fail-kfd-permission.txt 1
rec kfd-permission "$LSPCI_KEY" lspci/mi300x-8gpu-d-1002-74a1-PP.txt
rec kfd-not-render-group rocminfo rocminfo/fail-kfd-permission-not-render-group.txt 1
rec kfd-not-render-group rocminfo_--support rocminfo/fail-kfd-permission-not-render-group.txt 1
rec kfd-not-render-group "$LSPCI_KEY" lspci/mi300x-8gpu-d-1002-74a1-PP.txt
# mi100-igpu: the only real MI100 rocminfo (1x MI100 gfx908 + a Ryzen iGPU gfx1036); no PCI recording
rec mi100-igpu rocminfo rocminfo/mi100-plus-igpu.txt
rec mi100-igpu rocminfo_--support rocminfo/mi100-plus-igpu.txt
# mi300a: 1 MI300A APU engineering sample (gfx940); no PCI recording
rec mi300a rocminfo rocminfo/mi300a.txt
rec mi300a rocminfo_--support rocminfo/mi300a.txt
# mi250x-gfx90a: 1 MI250X GCD (gfx90a) and 4 CPU agents, recorded on LUMI; no smi or PCI recording
rec mi250x-gfx90a rocminfo rocminfo/mi250x-gfx90a.txt
rec mi250x-gfx90a rocminfo_--support rocminfo/mi250x-gfx90a.txt
finish "$STAGE/simpool"
SIM_DEB=$(ls "$STAGE"/simpool/pool/main/i/instinct-sim-profiles/*.deb)

SIM_REL=${SIM_DEB#"$STAGE"/simpool/}

# ---------------------------------------------------------------- indexes, Release, signatures
# index ROOT DESCRIPTION ORIGIN LABEL VERSION ARCHES...
index() {
    local root=$1 desc=$2 origin=$3 label=$4 version=$5
    shift 5
    local arches="$*" d=$root/dists/$SUITE a tmp
    for a in $arches; do
        mkdir -p "$d/main/binary-$a"
        (cd "$root" && apt-ftparchive --arch "$a" packages pool/main) > "$d/main/binary-$a/Packages"
        gzip -9 -n -k -f "$d/main/binary-$a/Packages"
    done
    tmp=$STAGE/Release.$$
    (cd "$d" && apt-ftparchive \
        -o "APT::FTPArchive::Release::Origin=$origin" \
        -o "APT::FTPArchive::Release::Label=$label" \
        -o "APT::FTPArchive::Release::Suite=$SUITE" \
        -o "APT::FTPArchive::Release::Codename=$SUITE" \
        -o "APT::FTPArchive::Release::Version=$version" \
        -o "APT::FTPArchive::Release::Architectures=$arches" \
        -o "APT::FTPArchive::Release::Components=main" \
        -o "APT::FTPArchive::Release::Description=$desc" \
        release .) > "$tmp"
    mv "$tmp" "$d/Release"
    rm -f "$d/InRelease" "$d/Release.gpg"
    GNUPGHOME=$OUT/.gnupg gpg --batch --yes --local-user "$KEY_UID" --clearsign -o "$d/InRelease" "$d/Release"
    GNUPGHOME=$OUT/.gnupg gpg --batch --yes --local-user "$KEY_UID" -abs -o "$d/Release.gpg" "$d/Release"
}

# ---------------------------------------------------------------- one release
# build_release NAME=VALUE...: the ROCm repository, the amdgpu driver repository and the graphics
# repository of one ROCm release, signed and indexed. Every version field is AMD's (README.md).
#   rocm=7.0.2 rel=70002 build=56            ROCm release, its <REL> number and build
#   rocminfo= smi= amdsmi= hipblaslt= rccl=  upstream parts of rocminfo, rocm-smi-lib, amd-smi-lib,
#                                            hipblaslt, rccl (rocm-core and the metas use rocm=)
#   amdgpu=30.10.2 amdgpu_build=2226257      driver release and build
#   kmod=6.14.14 amdgpu_rel=30100200         amdgpu module version, driver <REL> number
#   fw=30.10.2.0                             upstream part of amdgpu-dkms-firmware
#   ml_dev="DEB=UPSTREAM=CMAKE ..."          optional: the development packages a PyTorch source build
#                                            installs (roles/pytorch source path), each with the CMake
#                                            config LoadHIP.cmake finds (lib/cmake/CMAKE/CMAKE-config.cmake,
#                                            a placeholder) or, for CMAKE "roctx64", lib/libroctx64.so;
#                                            plus the metas rocm-hip-runtime-dev and rocm-ml-sdk
#   upgrade_scripts=0|1                      1: rocm-core's scripts also handle an upgrade from and
#                                            a downgrade to another release (see rocm_core_scripts);
#                                            0 keeps 7.0.2's original scripts byte for byte
# Package contents, dependencies and scripts (but rocm-core's, see upgrade_scripts) are the same
# for every release, under its own prefix /opt/rocm-<rocm>, DKMS module version
# <kmod>-<amdgpu_build>.<DISTVER> and repository folders.
build_release() {
    local rocm='' rel='' build='' rocminfo='' smi='' amdsmi='' hipblaslt='' rccl='' amdgpu='' amdgpu_build='' kmod='' amdgpu_rel='' fw='' upgrade_scripts=0 ml_dev=''
    local kv
    for kv in "$@"; do
        case ${kv%%=*} in
            rocm|rel|build|rocminfo|smi|amdsmi|hipblaslt|rccl|amdgpu|amdgpu_build|kmod|amdgpu_rel|fw|upgrade_scripts|ml_dev) local "$kv" ;;
            *) echo "build_release: unknown field $kv" >&2; exit 2 ;;
        esac
    done
    for kv in rocm rel build rocminfo smi amdsmi hipblaslt rccl amdgpu amdgpu_build kmod amdgpu_rel fw; do
        [[ -n ${!kv} ]] || { echo "build_release: $kv= is missing" >&2; exit 2; }
    done
    # AMD's ROCm folder drops a trailing ".0" only: 7.0.2 -> 7.0.2, 7.1.0 -> 7.1
    local folder=${rocm%.0}
    local ROCM_VER=$rocm ROCM_REL=$rel ROCM_BUILD=$build ROCM_PREFIX=/opt/rocm-$rocm
    local AMDGPU_VER=$amdgpu
    local AMDGPU_DKMS_VERSION="1:${kmod}.${amdgpu_rel}-${amdgpu_build}.${DISTVER}"
    local AMDGPU_FW_VERSION="${fw}.${amdgpu_rel}-${amdgpu_build}.${DISTVER}"
    local DKMS_MODVER="${kmod}-${amdgpu_build}.${DISTVER}"
    local R=$OUT/rocm/apt/$folder A=$OUT/amdgpu/$amdgpu/ubuntu G=$OUT/graphics/$folder/ubuntu
    local V_CORE V_ROCMINFO V_SMILIB V_AMDSMI V_HIPBLASLT V_RCCL V_META SRC

    # ------------------------------------------------------------ ROCm repository
    mkdir -p "$R"
    mkdir -p "$R/$(dirname "$SIM_REL")"
    cp "$SIM_DEB" "$R/$SIM_REL"

    V_CORE=$(rv "$rocm")
    mkpkg rocm-core "$V_CORE" amd64 "" "ROCm core (simulated): version file and the /opt/rocm link"
    mkdir -p "$PKGROOT$ROCM_PREFIX/.info" "$PKGROOT$ROCM_PREFIX/bin" "$PKGROOT$ROCM_PREFIX/lib"
    echo "${ROCM_VER}-${ROCM_BUILD}" > "$PKGROOT$ROCM_PREFIX/.info/version"
    rocm_core_scripts "$upgrade_scripts"
    finish "$R"

    V_ROCMINFO=$(rv "$rocminfo")
    mkpkg rocminfo "$V_ROCMINFO" amd64 "rocm-core, instinct-sim-profiles" "ROCm rocminfo (simulated): prints the profile's recorded rocminfo output"
    wrapper rocminfo "$ROCM_PREFIX/bin/rocminfo"
    finish "$R"

    V_SMILIB=$(rv "$smi")
    mkpkg rocm-smi-lib "$V_SMILIB" amd64 "rocm-core, instinct-sim-profiles" "ROCm SMI library and rocm-smi (simulated)"
    wrapper rocm-smi "$ROCM_PREFIX/bin/rocm-smi"
    placeholder "$ROCM_PREFIX/lib/librocm_smi64.so.7"
    finish "$R"

    V_AMDSMI=$(rv "$amdsmi")
    mkpkg amd-smi-lib "$V_AMDSMI" amd64 "rocm-core, instinct-sim-profiles" "AMD SMI library and amd-smi (simulated)"
    wrapper amd-smi "$ROCM_PREFIX/bin/amd-smi"
    placeholder "$ROCM_PREFIX/lib/libamd_smi.so.26"
    finish "$R"

    V_HIPBLASLT=$(rv "$hipblaslt")
    mkpkg hipblaslt "$V_HIPBLASLT" amd64 "rocm-core" "hipBLASLt (simulated placeholder library)"
    placeholder "$ROCM_PREFIX/lib/libhipblaslt.so.0"
    finish "$R"

    V_RCCL=$(rv "$rccl")
    mkpkg rccl "$V_RCCL" amd64 "rocm-core" "RCCL (simulated placeholder library)"
    placeholder "$ROCM_PREFIX/lib/librccl.so.1"
    finish "$R"

    V_META=$(rv "$rocm")
    mkpkg rocm-hip-runtime "$V_META" amd64 "rocm-core (= $V_CORE), rocminfo (= $V_ROCMINFO)" "ROCm HIP runtime meta package (simulated)"
    finish "$R"
    mkpkg rocm-hip-sdk "$V_META" amd64 "rocm-hip-runtime (= $V_META), hipblaslt (= $V_HIPBLASLT), rccl (= $V_RCCL)" "ROCm HIP SDK meta package (simulated subset)"
    finish "$R"
    mkpkg rocm "$V_META" amd64 "rocm-hip-sdk (= $V_META), rocm-smi-lib (= $V_SMILIB), amd-smi-lib (= $V_AMDSMI)" "ROCm meta package (simulated subset)"
    finish "$R"

    # What PyTorch's source build needs (roles/pytorch/tasks/source.yml): each development package
    # with the placeholder CMake config that LoadHIP.cmake's find_package reads, and the two metas.
    if [[ -n $ml_dev ]]; then
        local entry deb up cm v V_MIOPEN_DEV=''
        for entry in $ml_dev; do
            IFS='=' read -r deb up cm <<< "$entry"
            v=$(rv "$up")
            [[ $deb == miopen-hip-dev ]] && V_MIOPEN_DEV=$v
            mkpkg "$deb" "$v" amd64 "rocm-core" "ROCm $deb (simulated: the CMake config PyTorch's build finds, no library)"
            if [[ $cm == roctx64 ]]; then
                placeholder "$ROCM_PREFIX/lib/libroctx64.so"
            else
                mkdir -p "$PKGROOT$ROCM_PREFIX/lib/cmake/$cm"
                printf '# instinct-sim placeholder for %s %s (not AMD'"'"'s file)\nset(%s_FOUND TRUE)\nset(%s_VERSION "%s")\n' \
                    "$deb" "$v" "$cm" "$cm" "$up" > "$PKGROOT$ROCM_PREFIX/lib/cmake/$cm/$cm-config.cmake"
            fi
            finish "$R"
        done
        [[ -n $V_MIOPEN_DEV ]] || { echo "build_release: ml_dev has no miopen-hip-dev" >&2; exit 2; }
        mkpkg rocm-hip-runtime-dev "$V_META" amd64 "rocm-core (= $V_CORE), rocm-hip-runtime (= $V_META)" "ROCm HIP runtime development meta package (simulated subset)"
        finish "$R"
        mkpkg rocm-ml-sdk "$V_META" amd64 "rocm-core (= $V_CORE), rocm-hip-sdk (= $V_META), miopen-hip-dev (= $V_MIOPEN_DEV)" "ROCm ML SDK meta package (simulated subset)"
        finish "$R"
    fi

    # ------------------------------------------------------------ amdgpu repository
    mkdir -p "$A"
    mkpkg amdgpu-dkms-firmware "$AMDGPU_FW_VERSION" all "" "amdgpu firmware for the DKMS driver (simulated placeholder)"
    placeholder /usr/share/doc/amdgpu-dkms-firmware/instinct-sim-placeholder
    finish "$A"

    mkpkg amdgpu-dkms "$AMDGPU_DKMS_VERSION" all "dkms (>= 1.95), amdgpu-dkms-firmware (= $AMDGPU_FW_VERSION)" "amdgpu kernel driver as DKMS module (simulated: registers a DKMS tree, builds nothing)"
    SRC=/usr/src/amdgpu-$DKMS_MODVER
    mkdir -p "$PKGROOT$SRC"
    cat > "$PKGROOT$SRC/dkms.conf" <<EOF
PACKAGE_NAME="amdgpu"
PACKAGE_VERSION="$DKMS_MODVER"
AUTOINSTALL="yes"
BUILT_MODULE_NAME[0]="amdgpu"
BUILT_MODULE_LOCATION[0]="amd/amdgpu"
DEST_MODULE_LOCATION[0]="/updates/dkms"
MAKE[0]="true"
CLEAN="true"
EOF
    # postinst: what a successful "dkms install" leaves behind, for every kernel whose headers are
    # installed (/lib/modules/K/build). A real build is impossible in a container; the module file
    # is a placeholder. Without headers it stays "added", as dkms does when it cannot build.
    # On an upgrade or downgrade to another driver release dpkg runs the OLD package's
    # "prerm upgrade NEW-VERSION" before it unpacks the new one, then the NEW package's
    # "postinst configure OLD-VERSION": the prerm below removes everything of its own module
    # version (for "upgrade" as for "remove"), so only the new version is left in "dkms status".
    cat > "$PKGROOT/DEBIAN/postinst" <<EOF
#!/bin/sh
set -e
[ "\$1" = configure ] || exit 0
M=amdgpu
V=$DKMS_MODVER
T=/var/lib/dkms/\$M/\$V
mkdir -p "\$T"
ln -sfn $SRC "\$T/source"
kernels=\$( (uname -r; ls /lib/modules 2>/dev/null) | sort -u)
for k in \$kernels; do
    a=\$(uname -m)
    if [ ! -e "/lib/modules/\$k/build" ]; then
        [ "\$k" = "\$(uname -r)" ] && echo "Error! Your kernel headers for kernel \$k cannot be found at /lib/modules/\$k/build or /lib/modules/\$k/source." >&2
        continue
    fi
    mkdir -p "\$T/\$k/\$a/module" "\$T/\$k/\$a/log" "/lib/modules/\$k/updates/dkms"
    printf 'instinct-sim placeholder amdgpu module %s for %s\n' "\$V" "\$k" > "\$T/\$k/\$a/module/amdgpu.ko.zst"
    echo "instinct-sim: simulated build" > "\$T/\$k/\$a/log/make.log"
    cp "\$T/\$k/\$a/module/amdgpu.ko.zst" "/lib/modules/\$k/updates/dkms/amdgpu.ko.zst"
    ln -sfn "\$V/\$k/\$a" "/var/lib/dkms/\$M/kernel-\$k-\$a"
    # what depmod records after "dkms install" (dkms reads the module suffix from modules.dep)
    grep -qs '^updates/dkms/amdgpu.ko.zst:' "/lib/modules/\$k/modules.dep" || echo "updates/dkms/amdgpu.ko.zst:" >> "/lib/modules/\$k/modules.dep"
    echo "amdgpu.ko.zst: installed for kernel \$k (instinct-sim placeholder)"
done
exit 0
EOF
    cat > "$PKGROOT/DEBIAN/prerm" <<EOF
#!/bin/sh
set -e
case "\$1" in remove|upgrade|deconfigure) ;; *) exit 0 ;; esac
for l in /var/lib/dkms/amdgpu/kernel-*; do
    [ -L "\$l" ] || continue
    t=\$(readlink "\$l")
    case "\$t" in $DKMS_MODVER/*) ;; *) continue ;; esac
    k=\${t#$DKMS_MODVER/}; k=\${k%/*}
    rm -f "/lib/modules/\$k/updates/dkms/amdgpu.ko.zst" "\$l"
    [ -f "/lib/modules/\$k/modules.dep" ] && sed -i '/^updates\/dkms\/amdgpu\.ko\.zst:/d' "/lib/modules/\$k/modules.dep"
done
rm -rf /var/lib/dkms/amdgpu/$DKMS_MODVER
rmdir /var/lib/dkms/amdgpu 2>/dev/null || true
exit 0
EOF
    finish "$A"

    # ------------------------------------------------------------ graphics repository
    # ROCm 7 install docs list it (graphics/<folder>/ubuntu jammy main); nothing the roles need is in it.
    mkdir -p "$G/pool/main"

    index "$R" "ROCm APT Repository" repo.radeon.com repo.radeon.com "$ROCM_VER" amd64
    index "$A" "AMDGPU Ubuntu $SUITE repository" repo.radeon.com repo.radeon.com "$AMDGPU_VER" i386 amd64
    index "$G" "Graphics Ubuntu $SUITE repository" repo.radeon.com repo.radeon.com "$ROCM_VER" i386 amd64

    BUILD_INFO+="rocm repo:     rocm/apt/$folder            suite $SUITE component main (amd64)  ROCm $ROCM_VER
amdgpu repo:   amdgpu/$AMDGPU_VER/ubuntu     suite $SUITE component main (i386 amd64)  amdgpu-dkms $AMDGPU_DKMS_VERSION
graphics repo: graphics/$folder/ubuntu     suite $SUITE component main (i386 amd64, empty)
"
}
rv() { echo "$1.${ROCM_REL}-${ROCM_BUILD}~${DISTVER}"; }   # e.g. rv 1.0.0 -> 1.0.0.70002-56~22.04 (in build_release)

# rocm_core_scripts UPGRADE: rocm-core's postinst/prerm into $PKGROOT (in build_release).
# The postinst registers $ROCM_PREFIX as the "rocm" alternative (/opt/rocm) with priority <REL>, so
# a newer release wins in auto mode and /opt/rocm follows an upgrade.
# UPGRADE=1 adds what a change of release needs: dpkg runs the old package's "prerm upgrade" (7.0.2's
# keeps its alternative then), removes the old release's files (its .info/version among them), and
# then runs the new package's "postinst configure OLD-VERSION", which drops every other "rocm"
# alternative whose rocm-core is gone; its own prerm removes its alternative on "upgrade" too, so
# a downgrade back to an older release leaves /opt/rocm on that release, not on a removed folder.
rocm_core_scripts() {
    if [[ $1 == 0 ]]; then
        cat > "$PKGROOT/DEBIAN/postinst" <<EOF
#!/bin/sh
set -e
if [ "\$1" = configure ]; then
    update-alternatives --install /opt/rocm rocm $ROCM_PREFIX $ROCM_REL
fi
EOF
        cat > "$PKGROOT/DEBIAN/prerm" <<EOF
#!/bin/sh
set -e
if [ "\$1" = remove ]; then
    update-alternatives --remove rocm $ROCM_PREFIX || true
fi
EOF
        return 0
    fi
    cat > "$PKGROOT/DEBIAN/postinst" <<EOF
#!/bin/sh
set -e
if [ "\$1" = configure ]; then
    update-alternatives --install /opt/rocm rocm $ROCM_PREFIX $ROCM_REL
    # another release's rocm-core replaced by this one: drop its alternative
    for p in \$(update-alternatives --list rocm 2>/dev/null); do
        [ "\$p" = $ROCM_PREFIX ] && continue
        [ -e "\$p/.info/version" ] || update-alternatives --remove rocm "\$p" || true
    done
fi
EOF
    cat > "$PKGROOT/DEBIAN/prerm" <<EOF
#!/bin/sh
set -e
case "\$1" in
    remove|upgrade|deconfigure) update-alternatives --remove rocm $ROCM_PREFIX || true ;;
esac
EOF
}

BUILD_INFO=
# ROCm 7.0.2 with amdgpu 30.10.2: the release the scenarios install (README.md for every number)
# The upstream parts of the source build's development packages: AMD's 7.0.2 pool (README.md).
ML_DEV_7_0_2="miopen-hip-dev=3.5.0=miopen rocblas-dev=5.0.2=rocblas hipblas-dev=3.0.2=hipblas
hipblaslt-dev=1.0.0=hipblaslt rocrand-dev=4.0.0=rocrand hiprand-dev=3.0.0=hiprand hipfft-dev=1.0.20=hipfft
hipsparse-dev=4.0.1=hipsparse rocprim-dev=4.0.1=rocprim hipcub-dev=4.0.0=hipcub rocthrust-dev=4.0.0=rocthrust
hipsolver-dev=3.0.0=hipsolver rocsolver-dev=3.30.1=rocsolver rccl-dev=2.26.6=rccl
hipsparselt-dev=0.2.4=hipsparselt roctracer-dev=4.1.70002=roctx64"
build_release rocm=7.0.2 rel=70002 build=56 \
    rocminfo=1.0.0 smi=7.8.0 amdsmi=26.0.2 hipblaslt=1.0.0 rccl=2.26.6 \
    amdgpu=30.10.2 amdgpu_build=2226257 kmod=6.14.14 amdgpu_rel=30100200 fw=30.10.2.0 \
    ml_dev="$ML_DEV_7_0_2"
# ROCm 7.1.0 (folder 7.1) with amdgpu 30.20: the newer release an upgrade test moves to
build_release rocm=7.1.0 rel=70100 build=20 \
    rocminfo=1.0.0 smi=7.8.0 amdsmi=26.1.0 hipblaslt=1.1.0 rccl=2.27.7 \
    amdgpu=30.20 amdgpu_build=2238411 kmod=6.16.6 amdgpu_rel=30200000 fw=30.20.0.0 \
    upgrade_scripts=1

# ---------------------------------------------------------------- kernel repository
K=$OUT/kernel
mkdir -p "$K"
KPKGVER="${KVER%%-*}-0instinctsim1"
[[ $KPKGVER =~ ^[0-9] ]] || KPKGVER="0-0instinctsim1"
mkpkg "linux-headers-$KVER" "$KPKGVER" amd64 "" "kernel headers for $KVER (simulated node kernel boundary; no real headers)"
mkdir -p "$PKGROOT/usr/src/linux-headers-$KVER" "$PKGROOT/lib/modules/$KVER"
echo "# instinct-sim placeholder: the containers run the build host's kernel $KVER" > "$PKGROOT/usr/src/linux-headers-$KVER/Makefile"
ln -s "/usr/src/linux-headers-$KVER" "$PKGROOT/lib/modules/$KVER/build"
finish "$K"
mkpkg "linux-modules-extra-$KVER" "$KPKGVER" amd64 "" "extra kernel modules for $KVER (simulated node kernel boundary; placeholder)"
placeholder "/lib/modules/$KVER/kernel/instinct-sim-modules-extra-placeholder"
finish "$K"
mkdir -p "$K/$(dirname "$SIM_REL")"
cp "$SIM_DEB" "$K/$SIM_REL"

index "$K" "instinct-sim node kernel boundary ($KVER)" instinct-sim instinct-sim-kernel "$KVER" amd64

GNUPGHOME=$OUT/.gnupg gpgconf --kill gpg-agent 2>/dev/null || true
GNUPGHOME=$OUT/.gnupg-wrong gpgconf --kill gpg-agent 2>/dev/null || true
rm -rf "$STAGE"

cat > "$OUT/BUILD-INFO" <<EOF
${BUILD_INFO}kernel repo:   kernel                    suite $SUITE component main (amd64), kernel $KVER
key:           rocm/rocm.gpg.key   wrong key: wrong/rocm.gpg.key
EOF
echo "built $OUT (kernel $KVER)"
