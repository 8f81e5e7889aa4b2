# tractd build. `make` builds the daemon binary; `make check` runs every test;
# `make demo` tracks the built-in phantom; `make bench` runs the benchmark.
#   make CC=clang            build with clang
#   make SANITIZE=1          ASan+UBSan build in build-asan/
#   make fuzz                libFuzzer harnesses (clang) in build-fuzz/fuzz/
#   make check-fuzz          runs each harness briefly over its seed corpus
#   make bench-pyafq         pyAFQ's GPU tracking call timed (bench/pyafq_call.py)
#   make check-tidy          clang-tidy over daemon/, common/ and client/ (.clang-tidy)
#   make man                 tractd.1 and tractctl.1 from the --help texts
#   make install PREFIX=/usr/local DESTDIR=...
#   make check-cluster       a one-node Slurm cluster (root; slurm-wlm, munge) runs
#                            scripts/slurm/'s sharded job and cohort pilot
#   make venv                the tests' Python environment (VENV, default build/venv)
#   make venv-dipy           DIPY 1.12.1 for the PTT parity tests (VENV_DIPY)
#   make venv-nipype         nipype for tractd.nipype.Track's test (VENV_NIPYPE)
#   make bench-constraints   stopping criteria x angular_weight on the phantom, per
#                            getter (bench/constraints.py; CONSTRAINTS_ARGS)

CC ?= cc
PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
MANDIR ?= $(PREFIX)/share/man
DATADIR ?= $(PREFIX)/share
# The tests run in a virtual environment over Debian's Python and its
# packages (numpy, nibabel, dipy, pytest), adding the pinned PyPI packages of
# tests/requirements.txt that Debian lacks (trx-python).
SYSTEM_PYTHON ?= /usr/bin/python3
VENV ?= build/venv
VENV_DIPY ?= build/venv-dipy
VENV_NIPYPE ?= build/venv-nipype
PYTHON ?= $(VENV)/bin/python
SANITIZE ?= 0
FUZZ ?= 0

ifeq ($(FUZZ),1)
# libFuzzer build (`make fuzz` sets FUZZ=1): the daemon objects carry the
# fuzzer's coverage instrumentation and ASan+UBSan; the harnesses add
# -fsanitize=fuzzer, which links libFuzzer's main (clang's libclang-rt-14-dev).
CC = clang
BUILD ?= build-fuzz
SANFLAGS = -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined \
	-fno-omit-frame-pointer
OPT = -O1
else ifeq ($(SANITIZE),1)
BUILD ?= build-asan
SANFLAGS = -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
OPT = -O1
else
BUILD ?= build
SANFLAGS =
OPT = -O2
endif

PKGS = vulkan jansson zlib lapacke libmicrohttpd libsystemd libcrypto libzip
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
NIFTI_CFLAGS = -I/usr/include/nifti
NIFTI_LIBS = -lnifti2 -lznz

CFLAGS ?= $(OPT) -g
# -MMD -MP: each object's header dependencies go to a .d file beside it.
ALL_CFLAGS = -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes \
	-Wmissing-prototypes -MMD -MP -Idaemon -Iproto -I. -I$(BUILD) $(PKG_CFLAGS) $(NIFTI_CFLAGS) $(SANFLAGS) $(CFLAGS)
# Debian 12's libshaderc.so carries a partial glslang that clashes with the
# rest of it: link shaderc and glslang statically (glslang-dev, spirv-tools).
SHADERC_LIBS = -Wl,--start-group -lshaderc_combined -lglslang -lSPIRV -lSPIRV-Tools-opt -lSPIRV-Tools \
	-lMachineIndependent -lGenericCodeGen -lOSDependent -lOGLCompiler -Wl,--end-group -lstdc++
LIBS = $(PKG_LIBS) $(SHADERC_LIBS) $(NIFTI_LIBS) -llapack -lm -lpthread
ALL_LDFLAGS = $(SANFLAGS) $(LDFLAGS)

# daemon/ is one folder per layer (README, "Source layout"); main.c sits on top.
# common/ is below them all and below client/: the command-line code tractd
# and tractctl share (track's options, job documents), included as
# "common/x.h" and built once per binary's flags.
DAEMON_SRC = $(wildcard daemon/*.c daemon/*/*.c)
DAEMON_LIB_SRC = $(filter-out daemon/main.c,$(DAEMON_SRC))
COMMON_SRC = $(wildcard common/*.c)
DAEMON_LIB_OBJ = $(patsubst daemon/%.c,$(BUILD)/daemon/%.o,$(DAEMON_LIB_SRC)) \
	$(patsubst common/%.c,$(BUILD)/common/%.o,$(COMMON_SRC)) $(BUILD)/shaders_embed.o
SHADER_SRC = $(sort $(wildcard shaders/*.comp shaders/*.glsl))
UNIT_SRC = $(wildcard tests/unit/test_*.c)
UNIT_BIN = $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(UNIT_SRC))
FUZZ_SRC = $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_NAMES = $(patsubst tests/fuzz/fuzz_%.c,%,$(FUZZ_SRC))
FUZZ_BIN = $(patsubst %,build-fuzz/fuzz/fuzz_%,$(FUZZ_NAMES))
# check-fuzz: runs per harness over its corpus (FUZZ_RUNS inputs or FUZZ_TIME s).
FUZZ_RUNS ?= 20000
FUZZ_TIME ?= 10

# tractctl shares nothing with the daemon but proto/ and common/ (no -Idaemon).
CLIENT_PKGS = libcurl jansson libcrypto
CLIENT_SRC = $(wildcard client/*.c)
CLIENT_OBJ = $(patsubst client/%.c,$(BUILD)/client/%.o,$(CLIENT_SRC)) \
	$(patsubst common/%.c,$(BUILD)/client/common/%.o,$(COMMON_SRC))
CLIENT_CFLAGS = -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes \
	-Wmissing-prototypes -MMD -MP -Iproto -I. $(shell pkg-config --cflags $(CLIENT_PKGS) 2>/dev/null) $(SANFLAGS) $(CFLAGS)
CLIENT_LIBS := $(shell pkg-config --libs $(CLIENT_PKGS) 2>/dev/null)

.PHONY: all check check-layers check-tidy check-man check-unit check-asan check-python check-fuzz fuzz \
	fuzz-bins venv venv-dipy venv-nipype demo bench bench-encode bench-pyafq bench-lavapipe bench-constraints man install \
	check-cluster clean
all: $(BUILD)/tractd $(BUILD)/tractctl

$(BUILD)/daemon/%.o: daemon/%.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -c -o $@ $<

$(BUILD)/common/%.o: common/%.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -c -o $@ $<

$(BUILD)/embed: scripts/embed.c | $(BUILD)
	$(CC) -std=c11 -Wall -Wextra -Werror -O1 -o $@ $<

$(BUILD)/shaders_embed.c: $(BUILD)/embed $(SHADER_SRC)
	$(BUILD)/embed $(SHADER_SRC) > $@.tmp && mv $@.tmp $@

$(BUILD)/shaders_embed.o: $(BUILD)/shaders_embed.c
	$(CC) $(ALL_CFLAGS) -c -o $@ $<

$(BUILD)/libtractd.a: $(DAEMON_LIB_OBJ)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/tractd: $(BUILD)/daemon/main.o $(BUILD)/libtractd.a
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(LIBS)

$(BUILD)/tests/%: tests/unit/%.c $(BUILD)/libtractd.a | $(BUILD)/tests
	$(CC) $(ALL_CFLAGS) $(ALL_LDFLAGS) -o $@ $< $(BUILD)/libtractd.a $(LIBS) -lcmocka

# The encoders alone, on the CPU (bench/encode.c; `make bench-encode`).
$(BUILD)/bench-encode: bench/encode.c $(BUILD)/libtractd.a
	$(CC) $(ALL_CFLAGS) $(ALL_LDFLAGS) -o $@ $< $(BUILD)/libtractd.a $(LIBS)

$(BUILD)/client/%.o: client/%.c | $(BUILD)/client
	$(CC) $(CLIENT_CFLAGS) -c -o $@ $<

$(BUILD)/client/common/%.o: common/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CLIENT_CFLAGS) -c -o $@ $<

$(BUILD)/tractctl: $(CLIENT_OBJ)
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(CLIENT_LIBS)

$(BUILD)/fuzz/fuzz_%: tests/fuzz/fuzz_%.c $(BUILD)/libtractd.a | $(BUILD)/fuzz
	$(CC) $(ALL_CFLAGS) -fsanitize=fuzzer $(ALL_LDFLAGS) -o $@ $< $(BUILD)/libtractd.a $(LIBS)

$(BUILD) $(BUILD)/tests $(BUILD)/client $(BUILD)/fuzz:
	mkdir -p $@

# Header dependencies written by -MMD (absent before the first build).
-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)

# Unit tests (no GPU). Each binary is a cmocka suite.
check-unit: $(UNIT_BIN)
	@set -e; for t in $(UNIT_BIN); do echo "== $$t"; $$t; done

# The whole suite: unit tests, then an ASan/UBSan pass over the unit tests and
# the bad-input cases, then the engine tests on lavapipe, the DIPY parity
# tests and the daemon's integration tests (pytest).
check: all check-layers check-tidy check-man check-unit
	$(MAKE) --no-print-directory SANITIZE=1 check-asan
	$(MAKE) --no-print-directory check-fuzz
	$(MAKE) --no-print-directory check-python
	$(MAKE) --no-print-directory check-cluster

# Slurm: sharded jobs and cohort pilots through sbatch on a throwaway
# one-node cluster (scripts/check-cluster.sh; root, slurm-wlm and munge).
check-cluster: all
	sh scripts/check-cluster.sh $(BUILD)

check-asan: $(BUILD)/tractd $(BUILD)/tractctl check-unit

# daemon/'s includes run only downward between its layer folders, common/
# below them and client/, no circles.
check-layers:
	$(SYSTEM_PYTHON) scripts/check_layers.py .

# clang-tidy over daemon/, common/ and client/ with the build's flags, two files at a
# time; .clang-tidy says which checks run and why the others do not, and any
# finding fails. scripts/tidy/analyzer_hints.h goes before each daemon file but
# errbuf.c, which defines what it describes; the findings are printed from
# $(BUILD)/tidy.log. About 3 minutes on 2 cores.
TIDY ?= clang-tidy
TIDY_DAEMON_FLAGS = $(filter-out -MMD -MP,$(ALL_CFLAGS))
TIDY_CLIENT_FLAGS = $(filter-out -MMD -MP,$(CLIENT_CFLAGS))
TIDY_HINTS = -include scripts/tidy/analyzer_hints.h

check-tidy: | $(BUILD)
	@{ for f in $(filter-out daemon/base/errbuf.c,$(DAEMON_SRC)); do \
		echo "$$f -- $(TIDY_DAEMON_FLAGS) $(TIDY_HINTS)"; done; \
	   for f in $(COMMON_SRC); do echo "$$f -- $(TIDY_DAEMON_FLAGS)"; done; \
	   echo "daemon/base/errbuf.c -- $(TIDY_DAEMON_FLAGS)"; \
	   for f in $(CLIENT_SRC); do echo "$$f -- $(TIDY_CLIENT_FLAGS)"; done; } | \
		xargs -P2 -L1 $(TIDY) --quiet > $(BUILD)/tidy.log 2>&1 || \
		{ grep -v ' warnings* generated\.$$' $(BUILD)/tidy.log; exit 1; }
	@echo "clang-tidy: no findings in daemon/, common/ and client/"

# Man pages, made by help2man from the --help texts (the program's, then each
# command's that has its own), so that they say what the programs say.
MAN_PAGES = $(BUILD)/man/tractd.1 $(BUILD)/man/tractctl.1
TRACTD_COMMANDS_WITH_HELP = run track fit merge phantom warmup serve
TRACTCTL_COMMANDS = track submit status list wait fetch cancel delete volumes device

$(BUILD)/man/tractd.1: $(BUILD)/tractd scripts/man.sh
	@mkdir -p $(dir $@)
	scripts/man.sh $< 'GPU tractography on Vulkan for diffusion MRI' \
		$(TRACTD_COMMANDS_WITH_HELP) > $@.tmp && mv $@.tmp $@

$(BUILD)/man/tractctl.1: $(BUILD)/tractctl scripts/man.sh
	@mkdir -p $(dir $@)
	scripts/man.sh $< 'client of tractd, the GPU tractography daemon' \
		$(TRACTCTL_COMMANDS) > $@.tmp && mv $@.tmp $@

man: $(MAN_PAGES)

# The pages render without a warning from groff.
check-man: $(MAN_PAGES)
	@set -e; for p in $(MAN_PAGES); do \
		w=$$(groff -man -Tutf8 -ww -z $$p 2>&1); \
		[ -z "$$w" ] || { echo "$$p: $$w"; exit 1; }; done

# libFuzzer harnesses (tests/fuzz/, clang only) in build-fuzz/fuzz/. Fuzz one
# longer with e.g. `build-fuzz/fuzz/fuzz_jobspec -max_total_time=300
# tests/fuzz/corpus/jobspec` (new inputs go to the first corpus directory).
fuzz:
	$(MAKE) --no-print-directory FUZZ=1 fuzz-bins

fuzz-bins: $(patsubst %,$(BUILD)/fuzz/fuzz_%,$(FUZZ_NAMES))

# Each harness over its seed corpus, then briefly mutating it (not into the
# corpus: a scratch copy). Part of `make check` (about 30 s on 2 cores).
check-fuzz: fuzz
	@set -e; for n in $(FUZZ_NAMES); do echo "== fuzz_$$n"; \
		rm -rf build-fuzz/corpus-$$n; mkdir -p build-fuzz/corpus-$$n; \
		build-fuzz/fuzz/fuzz_$$n -runs=$(FUZZ_RUNS) -max_total_time=$(FUZZ_TIME) \
			-rss_limit_mb=2048 -print_final_stats=1 \
			$$(test -f tests/fuzz/$$n.dict && echo -dict=tests/fuzz/$$n.dict) build-fuzz/corpus-$$n \
			tests/fuzz/corpus/$$n > build-fuzz/fuzz_$$n.log 2>&1 || \
			{ tail -n 60 build-fuzz/fuzz_$$n.log; exit 1; }; \
		grep -E '^(Done|stat::number_of_executed_units)' build-fuzz/fuzz_$$n.log; done

# The stamp makes the venv once per change of the requirements; pip then
# finds every pin installed and exits at once.
$(VENV)/.stamp: tests/requirements.txt
	$(SYSTEM_PYTHON) -m venv --system-site-packages $(VENV)
	$(VENV)/bin/pip install -q --disable-pip-version-check -r tests/requirements.txt
	touch $@

venv: $(VENV)/.stamp

# DIPY 1.12.1 (PTT) apart from the main venv, which keeps Debian's DIPY 1.6 for
# the other parity tests; the PTT parity tests run DIPY's side with this Python.
$(VENV_DIPY)/.stamp: tests/requirements-dipy.txt
	$(SYSTEM_PYTHON) -m venv $(VENV_DIPY)
	$(VENV_DIPY)/bin/pip install -q --disable-pip-version-check -r tests/requirements-dipy.txt
	touch $@

venv-dipy: $(VENV_DIPY)/.stamp

# nipype (tests/requirements-nipype.txt) for tractd.nipype.Track's test, which
# installs client/python[nipype] beside it; Debian's numpy, scipy and nibabel.
$(VENV_NIPYPE)/.stamp: tests/requirements-nipype.txt
	$(SYSTEM_PYTHON) -m venv --system-site-packages $(VENV_NIPYPE)
	$(VENV_NIPYPE)/bin/pip install -q --disable-pip-version-check -r tests/requirements-nipype.txt
	touch $@

venv-nipype: $(VENV_NIPYPE)/.stamp

check-python: all $(VENV)/.stamp $(VENV_DIPY)/.stamp $(VENV_NIPYPE)/.stamp
	TRACTD=$(abspath build/tractd) TRACTD_ASAN=$(abspath build-asan/tractd) \
		TRACTCTL=$(abspath build/tractctl) TRACTD_DIPY_PYTHON=$(abspath $(VENV_DIPY)/bin/python) \
		TRACTD_NIPYPE_PYTHON=$(abspath $(VENV_NIPYPE)/bin/python) \
		$(PYTHON) -m pytest -q tests/parity tests/engine tests/daemon

demo: all
	scripts/demo.sh $(BUILD)/tractd

bench: all $(BUILD)/bench-encode
	bench/bench.sh $(BUILD)/tractd

# pyAFQ's GPU call through tractd.cuslines (bench/pyafq_call.py; python3 with
# numpy and nibabel): BENCH_PYAFQ_ARGS, e.g. "--dim 145,174,145 --voxel-size 1.25".
BENCH_PYAFQ_ARGS ?=
bench-pyafq: all
	$(SYSTEM_PYTHON) bench/pyafq_call.py --tractd $(BUILD)/tractd $(BENCH_PYAFQ_ARGS)

# The README's table of "Constraints and angular weighting on the phantom"
# (lavapipe will do: no timings), e.g. CONSTRAINTS_ARGS="--seeds 2000".
bench-constraints: all $(VENV)/.stamp
	$(PYTHON) bench/constraints.py --tractd $(BUILD)/tractd $(CONSTRAINTS_ARGS)

# BENCH_ENCODE_STREAMLINES (default 1000000) synthetic streamlines;
# BENCH_ENCODE_FORMATS (e.g. trx-f16) only those formats' rows.
bench-encode: $(BUILD)/bench-encode
	$(BUILD)/bench-encode $(or $(BENCH_ENCODE_STREAMLINES),1000000) $${TMPDIR:-/tmp} \
		$(BENCH_ENCODE_FORMATS)

# tractd on lavapipe against DIPY's probabilistic_tracking (bench/lavapipe.sh;
# needs $(VENV_DIPY)).
bench-lavapipe: all
	BENCH_DIPY_PYTHON=$${BENCH_DIPY_PYTHON:-$(VENV_DIPY)/bin/python} bench/lavapipe.sh $(BUILD)/tractd

SYSCONFDIR ?= /etc
UNITDIR ?= $(PREFIX)/lib/systemd/system

install: all man
	install -Dm755 $(BUILD)/tractd $(DESTDIR)$(BINDIR)/tractd
	install -Dm755 $(BUILD)/tractctl $(DESTDIR)$(BINDIR)/tractctl
	install -Dm644 $(BUILD)/man/tractd.1 $(DESTDIR)$(MANDIR)/man1/tractd.1
	install -Dm644 $(BUILD)/man/tractctl.1 $(DESTDIR)$(MANDIR)/man1/tractctl.1
	sed 's|/usr/local/bin/tractd|$(BINDIR)/tractd|' systemd/tractd.service > $(BUILD)/tractd.service
	install -Dm644 $(BUILD)/tractd.service $(DESTDIR)$(UNITDIR)/tractd.service
	install -Dm644 systemd/tractd.socket $(DESTDIR)$(UNITDIR)/tractd.socket
	install -Dm755 scripts/slurm/tractd-slurm $(DESTDIR)$(BINDIR)/tractd-slurm
	install -Dm755 scripts/slurm/tractd-pilot $(DESTDIR)$(DATADIR)/tractd/slurm/tractd-pilot
	test -e $(DESTDIR)$(SYSCONFDIR)/tractd/tractd.conf || \
		install -Dm644 etc/tractd.conf $(DESTDIR)$(SYSCONFDIR)/tractd/tractd.conf

clean:
	rm -rf build build-asan build-fuzz build-clang
