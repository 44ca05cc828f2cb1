# vrnic: the two commands a fresh machine needs.
#   make demo  - provision everything, start vrnic and two guests, run ib_write_bw between them
#   make test  - provision everything, then run every check and test (what CI runs)

.PHONY: demo test check provision

demo:
	bash tests/demo.sh

test:
	bash tests/run-all.sh

# Every shell script in the tree (settings in .shellcheckrc).
SHELL_SCRIPTS = $(shell git ls-files '*.sh' .ci/run)

# Static checks only: formatting, lints, shell scripts, generated files current.
check:
	cargo fmt --all --check
	shellcheck $(SHELL_SCRIPTS)
	cargo clippy --workspace --all-targets -- -D warnings
	cargo run -q -p vrnic-hwgen -- --check

provision:
	bash qemu-config/provision.sh all
