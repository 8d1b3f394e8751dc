# SigmaTrace's driver for rdma-core's own test suite (the suite itself is not modified).
# It does what the suite's run_tests.py does -- loads tests/__init__.py as module `tests`,
# parses the suite's arguments, runs it with unittest -- with two differences: Python's
# `random` is seeded (the suite draws QP capabilities, flags and sizes at random, so that a
# run is reproducible and a traced run meets the same tests as an untraced one), and every
# test's outcome is written, one JSON object per line, to the file named by argv[2].
import json
import os
import random
import sys
import unittest
from importlib.machinery import SourceFileLoader

suite_dir, results_path, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
random.seed(seed)
sys.path.insert(0, suite_dir)
sys.argv = [os.path.join(suite_dir, 'run_tests.py')]
from args_parser import parser  # noqa: E402

tests = SourceFileLoader('tests', os.path.join(suite_dir, '__init__.py')).load_module()
parser.parse_args()
rows = open(results_path, 'w')


def row(test, outcome, detail=''):
    rows.write(json.dumps({'id': test.id(), 'outcome': outcome, 'detail': detail}) + '\n')
    rows.flush()


class Recorder(unittest.TextTestResult):
    def addSuccess(self, test):
        super().addSuccess(test)
        row(test, 'ok')

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        row(test, 'skipped', reason)

    def addError(self, test, err):
        super().addError(test, err)
        row(test, 'error', self._exc_info_to_string(err, test))

    def addFailure(self, test, err):
        super().addFailure(test, err)
        row(test, 'fail', self._exc_info_to_string(err, test))

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        row(test, 'expected failure')

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        row(test, 'unexpected success')


runner = unittest.TextTestRunner(resultclass=Recorder, verbosity=2)
main = unittest.main(module=tests, testRunner=runner, exit=False)
rows.close()
sys.exit(0 if main.result.wasSuccessful() else 1)
