"""The polling handler's select keeps select's contract (ready objects, timeouts, any fd), and
``connect`` uses it (its CPU per request is what a rebalance of many processors pays)."""

from __future__ import annotations

import os
import socket
import time

import pytest

from metadata.zk.handler import PollingHandler, poll_select


def test_readable_and_writable_objects_come_back_as_given() -> None:
    left, right = socket.socketpair()
    read_fd, write_fd = os.pipe()
    try:
        assert poll_select([left, read_fd], [], [], 0) == ([], [], [])
        right.send(b"x")
        os.write(write_fd, b"y")
        readable, writable, errors = poll_select([left, read_fd], [right], [], 1.0)
        assert readable == [left, read_fd] and writable == [right] and errors == []
        # The same object asked for both: listed in both.
        assert poll_select([left], [left], [], 0) == ([left], [left], [])
    finally:
        for sock in (left, right):
            sock.close()
        os.close(read_fd)
        os.close(write_fd)


def test_a_timeout_waits_about_that_long_and_none_is_ready() -> None:
    left, right = socket.socketpair()
    try:
        started = time.monotonic()
        assert poll_select([left], [], [], 0.05) == ([], [], [])
        assert 0.04 <= time.monotonic() - started < 1.0
        with pytest.raises(ValueError, match="non-negative"):
            poll_select([left], [], [], -1)
    finally:
        left.close()
        right.close()


def test_a_hang_up_is_readable_and_a_closed_object_is_refused() -> None:
    left, right = socket.socketpair()
    right.close()
    assert poll_select([left], [], [], 0)[0] == [left]  # the read will see the end
    left.close()
    with pytest.raises((TypeError, ValueError)):
        poll_select([left], [], [], 0)


def test_fd_numbers_above_select_limit_work() -> None:
    read_fd, write_fd = os.pipe()
    high = os.dup2(read_fd, 1500)  # above FD_SETSIZE (1024): select() could not wait on it
    try:
        os.write(write_fd, b"z")
        assert poll_select([high], [], [], 1.0)[0] == [high]
    finally:
        for fd in (read_fd, write_fd, high):
            os.close(fd)


def test_the_handler_selects_with_poll() -> None:
    left, right = socket.socketpair()
    try:
        right.send(b"x")
        assert PollingHandler().select([left], [], [], 1.0)[0] == [left]
    finally:
        left.close()
        right.close()
