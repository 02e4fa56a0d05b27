#!/bin/sh
# tests/run_example.sh judges by exit status and by metric: each case below
# must pass or fail as stated (the reproducers of issue 27's item 8).
here=$(dirname "$0")
bad=0
expect() { # expect pass|fail description run_example.sh-arguments...
    want=$1 what=$2
    shift 2
    sh "$here/run_example.sh" "$@" >/dev/null 2>&1
    rc=$?
    if { [ "$want" = pass ] && [ $rc -eq 0 ]; } || { [ "$want" = fail ] && [ $rc -ne 0 ] && [ $rc -ne 77 ]; }; then
        echo "ok: $what (status $rc)"
    else
        echo "WRONG: $what: status $rc, wanted $want"
        bad=1
    fi
}
expect pass "a good accuracy and status 0" --at-least 'test accuracy: ' 0.5 -- sh -c 'echo "test accuracy: 0.8125"'
expect fail "a good accuracy but status 3" --at-least 'test accuracy: ' 0.5 -- sh -c 'echo "test accuracy: 0.8125"; exit 3'
expect fail "accuracy 0.0000 and status 0" --at-least 'test accuracy: ' 0.5 -- sh -c 'echo "test accuracy: 0.0000"'
expect fail "no accuracy line" --at-least 'test accuracy: ' 0.5 -- sh -c 'echo "trained"'
expect fail "accuracy nan" --at-least 'test accuracy: ' 0.5 -- sh -c 'echo "test accuracy: nan"'
expect pass "the last of two lines counts" --at-least 'test accuracy: ' 0.5 -- sh -c 'echo "test accuracy: 0.1"; echo "test accuracy: 0.7"'
expect pass "a loss under its bound, exponent form" --at-most 'final rel_l2 ' 0.1 -- sh -c 'echo "final rel_l2 3.0217e-02 loss 8.7e-01"'
expect fail "a loss over its bound" --at-most 'validation loss: ' 3.5 -- sh -c 'echo "validation loss: 4.1000 nats/char"'
expect pass "a required line present" --line 'solver check passed' -- sh -c 'echo "solver check passed"'
expect fail "a required line missing" --line 'solver check passed' -- sh -c 'echo "solver check failed"'
expect fail "every check must hold" --line 'loss decreased' --at-most 'x ' 1 -- sh -c 'echo "loss decreased"; echo "x 2"'
exit $bad
