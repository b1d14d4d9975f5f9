# ForgeCI. `make test` and `make dev` install what is missing themselves.
GO           ?= go
ARTIFACTS_DIR ?= bin/lambda
LAMBDA_ARCH  ?= arm64
# One Lambda bootstrap: static, stripped, without the legacy RPC runtime.
lambda = CGO_ENABLED=0 GOOS=linux GOARCH=$(LAMBDA_ARCH) $(GO) build -tags lambda.norpc -trimpath \
         -ldflags='-s -w' -o $(ARTIFACTS_DIR)/bootstrap ./functions/$(1)

.PHONY: demo deps test lint bench chaos fuzz dev build clean FORCE

deps:                ## install missing Debian packages and Go tools
	@scripts/deps.sh

bin/forgeci: FORCE
	$(GO) build -o $@ ./cmd/forgeci

bin/forgeci-runner: FORCE
	$(GO) build -o $@ ./runner/cmd/forgeci-runner

bin/forgeci-runner-linux-%: FORCE   ## the runner for another machine: -amd64 or -arm64 (infra/)
	CGO_ENABLED=0 GOOS=linux GOARCH=$* $(GO) build -trimpath -ldflags='-s -w' -o $@ ./runner/cmd/forgeci-runner

demo: deps bin/forgeci bin/forgeci-runner   ## the main job: local ForgeCI + runner + example pipeline to PASSED
	scripts/demo.sh

lint: deps           ## vet, staticcheck, gofmt and go.mod drift
	$(GO) vet ./...
	PATH="$$($(GO) env GOPATH)/bin:$$PATH" staticcheck ./...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed: $$out"; exit 1; fi
	@$(GO) mod tidy -diff || { echo "go.mod/go.sum are not tidy: run go mod tidy"; exit 1; }

test: deps lint bin/forgeci   ## the whole suite against real PostgreSQL
	bin/forgeci services -- $(GO) test -race -count=1 -timeout 15m ./...

bench: deps bin/forgeci       ## benchmarks, each beside its baseline
	bin/forgeci services -- $(GO) run ./cmd/forgeci-bench
	bin/forgeci services -- $(GO) run ./cmd/forgeci-lambdabench

chaos: deps bin/forgeci       ## faults for CHAOS_DURATION (default 5m), then the checker; and with the database clock 5 minutes off either way
	bin/forgeci services -- $(GO) run ./cmd/forgeci-chaos -duration $(or $(CHAOS_DURATION),5m)
	bin/forgeci services -- $(GO) run ./cmd/forgeci-chaos -duration 1m -db-clock +5m
	bin/forgeci services -- $(GO) run ./cmd/forgeci-chaos -duration 1m -db-clock -5m

fuzz:                         ## each fuzz target for FUZZTIME (default 30s)
	$(GO) test -run '^$$' -fuzz 'FuzzExtract$$' -fuzztime $(or $(FUZZTIME),30s) ./shared/snapshot/
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime $(or $(FUZZTIME),30s) ./shared/pipeline/
	$(GO) test -run '^$$' -fuzz FuzzStream -fuzztime $(or $(FUZZTIME),30s) ./shared/mask/
	$(GO) test -run '^$$' -fuzz FuzzSwitch -fuzztime $(or $(FUZZTIME),30s) ./shared/mask/
	$(GO) test -run '^$$' -fuzz FuzzVerify -fuzztime $(or $(FUZZTIME),30s) ./shared/idtoken/
	$(GO) test -run '^$$' -fuzz FuzzExtractTarball -fuzztime $(or $(FUZZTIME),30s) ./shared/snapshot/
	$(GO) test -run '^$$' -fuzz FuzzLocalPath -fuzztime $(or $(FUZZTIME),30s) ./shared/ui/
	$(GO) test -run '^$$' -fuzz FuzzTemplate -fuzztime $(or $(FUZZTIME),30s) ./shared/expr/
	$(GO) test -run '^$$' -fuzz FuzzParseOutputs -fuzztime $(or $(FUZZTIME),30s) ./runner/agent/
	$(GO) test -run '^$$' -fuzz FuzzStepEnvFiles -fuzztime $(or $(FUZZTIME),30s) ./runner/agent/
	$(GO) test -run '^$$' -fuzz FuzzCommandFilter -fuzztime $(or $(FUZZTIME),30s) ./runner/agent/
	$(GO) test -run '^$$' -fuzz FuzzFilterPattern -fuzztime $(or $(FUZZTIME),30s) ./shared/pipeline/
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime $(or $(FUZZTIME),30s) ./shared/junit/
	$(GO) test -run '^$$' -fuzz FuzzValidLabel -fuzztime $(or $(FUZZTIME),30s) ./shared/domain/
	$(GO) test -run '^$$' -fuzz FuzzVersionAndDigest -fuzztime $(or $(FUZZTIME),30s) ./shared/protocol/

dev: deps bin/forgeci         ## a local ForgeCI on 127.0.0.1:8080
	bin/forgeci dev

build:                        ## every Lambda bootstrap into bin/lambda/<name>/
	@for f in $$(ls functions); do $(MAKE) --no-print-directory ARTIFACTS_DIR=bin/lambda/$$f build-$$(echo $$f | sed 's/./\U&/')Function || exit 1; done

clean:
	rm -rf bin .tmp

# SAM (BuildMethod: makefile) calls build-<LogicalId> with ARTIFACTS_DIR set.
build-RegisterFunction: ; $(call lambda,register)
build-ClaimFunction: ; $(call lambda,claim)
build-HeartbeatFunction: ; $(call lambda,heartbeat)
build-SourceFunction: ; $(call lambda,source)
build-LogsFunction: ; $(call lambda,logs)
build-ArtifactsFunction: ; $(call lambda,artifacts)
build-CacheFunction: ; $(call lambda,cache)
build-ApiFunction: ; $(call lambda,api)
build-UiFunction: ; $(call lambda,ui)
build-CompleteFunction: ; $(call lambda,complete)
build-SweeperFunction: ; $(call lambda,sweeper)
build-ScalerFunction: ; $(call lambda,scaler)
build-GcFunction: ; $(call lambda,gc)
build-WebhookFunction: ; $(call lambda,webhook)
build-ScmFunction: ; $(call lambda,scm)
build-MigrateFunction: ; $(call lambda,migrate)
build-AdminFunction: ; $(call lambda,admin)
build-OidcFunction: ; $(call lambda,oidc)
