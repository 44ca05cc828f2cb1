#!/usr/bin/env python3
"""Runs one module of rdma-core's test suite in a guest and records each test's outcome.

Usage: pyverbs_module.py RESULTS MODULE [SUITE-ARGS]...   (e.g. --dev vrnic0 --gid 1)

tests/guest/pyverbs.sh starts one process per module, so a crash ends only that module.
RESULTS gets one line per event, tab-separated, written as it happens:
    start   TEST-ID
    OUTCOME TEST-ID DETAIL     OUTCOME: ok, skipped, failed or error; DETAIL: the skip
                               reason or the exception's last line
    done
A file without "done" is a crash; its last "start" without an outcome names the test.
The verbose unittest output (tracebacks included) goes to stdout.
"""
import importlib
import sys
import traceback
import unittest

SUITE = "/opt/rdma-core-tests"  # tests/ there (qemu-config/provision.sh puts it there)


class Recorder(unittest.TextTestResult):
    """A verbose text result that also writes every outcome to the results file."""

    results = None  # the open results file, set before the run

    def _record(self, outcome, test, detail=""):
        detail = " ".join(str(detail).split())  # one line, no tabs
        self.results.write(f"{outcome}\t{test.id()}\t{detail}\n")
        self.results.flush()

    @staticmethod
    def _last_line(err):
        return traceback.format_exception_only(err[0], err[1])[-1].strip()

    def startTest(self, test):
        self._record("start", test)
        super().startTest(test)

    def addSuccess(self, test):
        super().addSuccess(test)
        self._record("ok", test)

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._record("ok", test, "expected failure")

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._record("skipped", test, reason)

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._record("failed", test, self._last_line(err))

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._record("failed", test, "unexpected success")

    def addError(self, test, err):
        super().addError(test, err)
        self._record("error", test, self._last_line(err))

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None:
            failed = issubclass(err[0], test.failureException)
            self._record("failed" if failed else "error", subtest, self._last_line(err))


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    results_path, module = sys.argv[1:3]
    # The suite imports its helpers as top-level modules (args_parser, base, ...) and reads
    # its options (--dev, --port, --gid) from sys.argv through args_parser.
    sys.path[:0] = [SUITE, SUITE + "/tests"]
    sys.argv[1:] = sys.argv[3:]
    from args_parser import parser

    parser.parse_args()
    with open(results_path, "w", encoding="utf-8") as results:
        Recorder.results = results
        tests = unittest.defaultTestLoader.loadTestsFromModule(
            importlib.import_module("tests." + module))
        runner = unittest.TextTestRunner(stream=sys.stdout, verbosity=2, resultclass=Recorder)
        runner.run(tests)
        results.write("done\n")


if __name__ == "__main__":
    main()
