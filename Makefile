# Silo — `make run` starts Silo on an embedded PostgreSQL; `make test` runs the whole suite.
# Both install what is missing first: Go modules, sqlc, and (as root, through apt-get) Debian's
# PostgreSQL server binaries; make test also plpgsql_check, the PL/pgSQL linter it runs over sql/.

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

.PHONY: run test build deps deps-pg deps-lint deps-go sqlc generate sqlc-check vet fmt-check bench fuzz clean

run: deps build
	./$(SILO) up

test: deps deps-lint build vet fmt-check sqlc-check
	./$(SILO) tempdb -- $(GO) test -count=1 -timeout 15m ./...

build: deps-go
	$(GO) build -o $(SILO) ./cmd/silo

# silo on the PATH of Go users: $GOBIN, else $(go env GOPATH)/bin.
.PHONY: install
install: deps-go
	GOBIN='$(INSTALL_DIR)' $(GO) install ./cmd/silo
	@echo "installed $(INSTALL_DIR)/silo ($$('$(INSTALL_DIR)/silo' version))"

deps: deps-pg deps-go

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

# plpgsql_check, for the server Silo starts ($SILO_PG_BIN, else the newest /usr/lib/postgresql/*/bin):
# the lint test in db/ runs it over every PL/pgSQL function of sql/. Only make test needs it.
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

clean:
	rm -rf bin
