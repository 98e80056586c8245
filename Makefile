# Silo — `make run` starts Silo on an embedded PostgreSQL; `make test` runs the whole suite.
# Both install what is missing first: Go modules, sqlc, and (as root, through apt-get) Debian's
# PostgreSQL server binaries, pg_partman (native time partitioning) and PL/Python (Python belts;
# optional: without it, and when not root, Silo runs SQL belts only); make test also
# plpgsql_check, the PL/pgSQL linter it runs over sql/. TimescaleDB is in no package registry:
# when a TimescaleDB source tarball lies beside the project (TIMESCALEDB_SRC), it is built and
# installed once (as root), and Silo's embedded PostgreSQL preloads it; without it Silo uses native
# partitioning and the suite tests that path only.

SHELL      := /bin/bash
GO         ?= go
# Where make install puts silo: GOBIN as the caller set it (environment or go env -w), else the
# bin directory of the first GOPATH entry. Read before the GOBIN below, which names sqlc's place.
INSTALL_DIR := $(or $(shell $(GO) env GOBIN),$(firstword $(subst :, ,$(shell $(GO) env GOPATH)))/bin)
GOBIN      := $(shell $(GO) env GOPATH)/bin
SQLC_VER   := v1.31.1
SQLC       := $(GOBIN)/sqlc
SILO       := bin/silo
FUZZTIME   ?= 30s
# TimescaleDB's source: a release tarball (timescaledb-X.Y.Z.tar.gz) or an unpacked source tree.
# Default: the newest timescaledb-*.tar.gz in a folder named timescaledb beside the project's
# folder (../*/timescaledb/). Empty: TimescaleDB is not built.
TIMESCALEDB_SRC ?= $(lastword $(shell ls -v ../*/timescaledb/timescaledb-*.tar.gz 2>/dev/null))
# apt-get waits this long for another apt or dpkg run to finish.
APT_GET    := DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300

.PHONY: run test build deps deps-pg deps-partman deps-plpython deps-timescaledb deps-lint deps-mqtt deps-pryv deps-go sqlc generate sqlc-check vet fmt-check bench fuzz clean

run: deps build
	./$(SILO) up

test: deps deps-lint deps-mqtt deps-pryv build vet fmt-check sqlc-check
	SILO_PRYV_MODULES=$${SILO_PRYV_MODULES:-$(PRYV_MODULES)} ./$(SILO) tempdb -- $(GO) test -count=1 -timeout 15m ./...

build: deps-go
	$(GO) build -o $(SILO) ./cmd/silo

# silo on the PATH of Go users: $GOBIN, else $(go env GOPATH)/bin.
.PHONY: install
install: deps-go
	GOBIN='$(INSTALL_DIR)' $(GO) install ./cmd/silo
	@echo "installed $(INSTALL_DIR)/silo ($$('$(INSTALL_DIR)/silo' version))"

deps: deps-pg deps-partman deps-plpython deps-timescaledb deps-go

deps-go:
	@$(GO) mod download

# PostgreSQL server binaries: Debian's packages. No cluster is created or started by the install:
# Silo starts its own.
deps-pg:
	@if ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || ! command -v psql >/dev/null; then \
		if [ "$$(id -u)" = 0 ]; then \
			echo "installing PostgreSQL (Debian packages)"; \
			mkdir -p /etc/postgresql-common; \
			grep -qs '^create_main_cluster' /etc/postgresql-common/createcluster.conf || \
				echo 'create_main_cluster = false' >> /etc/postgresql-common/createcluster.conf; \
			printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql postgresql-client; \
			rc=$$?; rm -f /usr/sbin/policy-rc.d; exit $$rc; \
		else \
			echo "PostgreSQL server binaries are missing: install Debian's postgresql package (or set SILO_PG_BIN)"; exit 1; \
		fi; \
	fi

# pg_partman, Silo's native time partitioning when the server has no TimescaleDB, for the server
# Silo starts ($SILO_PG_BIN, else the newest /usr/lib/postgresql/*/bin): Debian's package.
deps-partman: deps-pg
	@bin=$${SILO_PG_BIN:-$$(ls -dv /usr/lib/postgresql/*/bin | tail -n1)}; \
	ver=$$("$$bin/postgres" --version | sed -E 's/^[^0-9]*([0-9]+).*/\1/'); \
	share=$$("$$bin/pg_config" --sharedir 2>/dev/null || echo /usr/share/postgresql/$$ver); \
	if [ ! -f "$$share/extension/pg_partman.control" ]; then \
		if [ "$$(id -u)" = 0 ]; then \
			echo "installing pg_partman for PostgreSQL $$ver (Debian package)"; \
			$(APT_GET) update -qq && $(APT_GET) install -y -qq postgresql-$$ver-partman; \
		else \
			echo "pg_partman is missing: install Debian's postgresql-$$ver-partman package (Silo's native time partitioning)"; exit 1; \
		fi; \
	fi

# mosquitto_pub and mosquitto_sub, the MQTT clients of the README's examples (run by make test):
# Debian's mosquitto-clients, as root; without it (not root) the README test fails where it uses them.
deps-mqtt:
	@if ! command -v mosquitto_pub >/dev/null; then \
		if [ "$$(id -u)" = 0 ]; then \
			echo "installing mosquitto-clients (Debian package)"; \
			$(APT_GET) update -qq && $(APT_GET) install -y -qq mosquitto-clients; \
		else \
			echo "mosquitto_pub is missing: install Debian's mosquitto-clients package (the README's MQTT examples)"; exit 1; \
		fi; \
	fi

# PL/Python (plpython3u), which runs Python belts, for the server Silo starts ($SILO_PG_BIN, else
# the newest /usr/lib/postgresql/*/bin): Debian's package postgresql-plpython3-$ver. A server
# without it runs SQL belts only and refuses Python ones; make installs it like PostgreSQL, so
# that the tests and the README's Python belt run.
deps-plpython: deps-pg
	@bin=$${SILO_PG_BIN:-$$(ls -dv /usr/lib/postgresql/*/bin | tail -n1)}; \
	ver=$$("$$bin/postgres" --version | sed -E 's/^[^0-9]*([0-9]+).*/\1/'); \
	share=$$("$$bin/pg_config" --sharedir 2>/dev/null || echo /usr/share/postgresql/$$ver); \
	if [ ! -f "$$share/extension/plpython3u.control" ]; then \
		if [ "$$(id -u)" = 0 ]; then \
			echo "installing PL/Python for PostgreSQL $$ver (Debian package)"; \
			$(APT_GET) update -qq && $(APT_GET) install -y -qq postgresql-plpython3-$$ver; \
		else \
			echo "PL/Python is missing: install Debian's postgresql-plpython3-$$ver package (Python belts; a server without it runs SQL belts only)"; exit 1; \
		fi; \
	fi

# TimescaleDB, built from TIMESCALEDB_SRC for the server Silo starts, once: skipped when it is
# installed already ($(pg_config --pkglibdir)/timescaledb-*.so), when no source is found, or when
# not run as root. The build (cmake and PostgreSQL's server headers from apt-get, about two minutes
# on two cores) runs in a temporary folder, never in the project.
deps-timescaledb: deps-pg
	@bin=$${SILO_PG_BIN:-$$(ls -dv /usr/lib/postgresql/*/bin | tail -n1)}; \
	ver=$$("$$bin/postgres" --version | sed -E 's/^[^0-9]*([0-9]+).*/\1/'); \
	libdir=$$("$$bin/pg_config" --pkglibdir 2>/dev/null || echo /usr/lib/postgresql/$$ver/lib); \
	src='$(TIMESCALEDB_SRC)'; \
	if ls "$$libdir"/timescaledb-*.so >/dev/null 2>&1; then exit 0; fi; \
	if [ -z "$$src" ] || [ ! -e "$$src" ]; then \
		echo "TimescaleDB: no source found (set TIMESCALEDB_SRC to a timescaledb-*.tar.gz or a source folder): Silo uses native partitioning"; exit 0; \
	fi; \
	if [ "$$(id -u)" != 0 ]; then \
		echo "TimescaleDB: not installed and not root, so not built from $$src: Silo uses native partitioning"; exit 0; \
	fi; \
	echo "building TimescaleDB from $$src for PostgreSQL $$ver (about two minutes, once)"; \
	$(APT_GET) update -qq && $(APT_GET) install -y -qq cmake postgresql-$$ver postgresql-server-dev-$$ver || exit 1; \
	work=$$(mktemp -d); trap 'rm -rf "$$work"' EXIT; \
	if [ -d "$$src" ]; then cp -a "$$src"/. "$$work"/; else tar -xzf "$$src" -C "$$work" || exit 1; fi; \
	top=$$(dirname "$$(find "$$work" -maxdepth 2 -name bootstrap -type f | head -n1)"); \
	cd "$$top" && ./bootstrap -DREGRESS_CHECKS=OFF -DTAP_CHECKS=OFF -DWARNINGS_AS_ERRORS=OFF -DLINTER=OFF \
		-DPG_CONFIG="$$bin/pg_config" >"$$work/build.log" 2>&1 && \
	cd build && make -j"$$(nproc)" >>"$$work/build.log" 2>&1 && make install >>"$$work/build.log" 2>&1 || \
		{ echo "TimescaleDB build failed:"; tail -n 40 "$$work/build.log"; exit 1; }; \
	echo "installed TimescaleDB into $$libdir"

# plpgsql_check, for the server Silo starts ($SILO_PG_BIN, else the newest /usr/lib/postgresql/*/bin):
# the lint test in db/ runs it over every PL/pgSQL function of sql/. Only make test needs it.
# Pryv's JavaScript client (npm package pryv), which a test drives against Silo's series routes:
# installed once into .cache/pryv with the machine's npm (Node.js and npm: Debian's nodejs and npm
# packages where missing, as root).
PRYV_VER     := 3.0.4
PRYV_MODULES := $(CURDIR)/.cache/pryv/node_modules

deps-pryv:
	@if [ ! -d '$(PRYV_MODULES)/pryv' ]; then \
		if ! command -v npm >/dev/null || ! command -v node >/dev/null; then \
			if [ "$$(id -u)" = 0 ]; then \
				echo "installing Node.js and npm (Debian packages)"; \
				$(APT_GET) update -qq && $(APT_GET) install -y -qq nodejs npm || exit 1; \
			else \
				echo "Node.js and npm are missing: install Debian's nodejs and npm packages (a test drives Pryv's JavaScript client)"; exit 1; \
			fi; \
		fi; \
		echo "installing Pryv's JavaScript client (npm pryv@$(PRYV_VER)) into .cache/pryv"; \
		mkdir -p .cache/pryv && npm install --silent --no-audit --no-fund --prefix .cache/pryv pryv@$(PRYV_VER) >/dev/null || exit 1; \
	fi

deps-lint: deps-pg
	@bin=$${SILO_PG_BIN:-$$(ls -dv /usr/lib/postgresql/*/bin | tail -n1)}; \
	ver=$$("$$bin/postgres" --version | sed -E 's/^[^0-9]*([0-9]+).*/\1/'); \
	share=$$("$$bin/pg_config" --sharedir 2>/dev/null || echo /usr/share/postgresql/$$ver); \
	if [ ! -f "$$share/extension/plpgsql_check.control" ]; then \
		if [ "$$(id -u)" = 0 ]; then \
			echo "installing plpgsql_check for PostgreSQL $$ver (Debian package)"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql-$$ver-plpgsql-check; \
		else \
			echo "plpgsql_check is missing: install Debian's postgresql-$$ver-plpgsql-check package (make test lints sql/ with it)"; exit 1; \
		fi; \
	fi

$(SQLC):
	@echo "installing sqlc $(SQLC_VER) (a few minutes, once)"
	CGO_ENABLED=0 $(GO) install github.com/sqlc-dev/sqlc/cmd/sqlc@$(SQLC_VER)

sqlc: $(SQLC)
	@$(SQLC) version | grep -q '$(SQLC_VER)' || CGO_ENABLED=0 $(GO) install github.com/sqlc-dev/sqlc/cmd/sqlc@$(SQLC_VER)

generate: sqlc
	$(SQLC) generate

# The generated code in db/ must match queries/, migrations/ and sql/.
sqlc-check: sqlc
	@$(SQLC) diff || { echo "db/ is stale: run make generate and commit"; exit 1; }

vet:
	$(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change: $$out"; exit 1; fi

# Workloads next to raw PostgreSQL baselines, on a durable throw-away cluster (synchronous commit on).
bench: deps build
	$(GO) build -o bin/silo-bench ./bench
	SILO_TEMPDB_DURABLE=1 ./$(SILO) tempdb -- ./bin/silo-bench

# Fuzz the parsers (profile update validation in SQL, the HTTP body handling).
fuzz: deps build
	./$(SILO) tempdb -- $(GO) test ./db -run '^$$' -fuzz 'FuzzProfileApply$$' -fuzztime $(FUZZTIME)
	./$(SILO) tempdb -- $(GO) test ./db -run '^$$' -fuzz FuzzProfileApplyRequests -fuzztime $(FUZZTIME)
	./$(SILO) tempdb -- $(GO) test ./server -run '^$$' -fuzz FuzzProfileUpdates -fuzztime $(FUZZTIME)
	./$(SILO) tempdb -- $(GO) test ./db -run '^$$' -fuzz FuzzAccountEvent -fuzztime $(FUZZTIME)
	$(GO) test ./server -run '^$$' -fuzz FuzzAccountEventsQuery -fuzztime $(FUZZTIME)
	./$(SILO) tempdb -- $(GO) test ./db -run '^$$' -fuzz FuzzEventIngest -fuzztime $(FUZZTIME)
	./$(SILO) tempdb -- $(GO) test ./server -run '^$$' -fuzz FuzzEventBody -fuzztime $(FUZZTIME)
	./$(SILO) tempdb -- $(GO) test ./db -run '^$$' -fuzz FuzzSeriesAppend -fuzztime $(FUZZTIME)
	$(GO) test ./server -run '^$$' -fuzz FuzzSeriesCSV -fuzztime $(FUZZTIME)
	$(GO) test ./server -run '^$$' -fuzz FuzzSeriesColumns -fuzztime $(FUZZTIME)
	./$(SILO) tempdb -- $(GO) test ./server -run '^$$' -fuzz FuzzBeltCreate -fuzztime $(FUZZTIME)
	$(GO) test ./server -run '^$$' -fuzz FuzzCacheKey -fuzztime $(FUZZTIME)
	./$(SILO) tempdb -- $(GO) test ./db -run '^$$' -fuzz FuzzConfigJSON -fuzztime $(FUZZTIME)
	./$(SILO) tempdb -- $(GO) test ./db -run '^$$' -fuzz FuzzOdsIngest -fuzztime $(FUZZTIME)
	./$(SILO) tempdb -- $(GO) test ./db -run '^$$' -fuzz FuzzPurgePeriod -fuzztime $(FUZZTIME)

clean:
	rm -rf bin
