"""cancel_and_wait: the tasks given end, whatever they end with, and None is skipped."""

import asyncio

from hoarddb.cluster.tasks import cancel_and_wait


def test_every_task_is_cancelled_before_the_first_is_awaited_and_what_each_ends_with_is_swallowed():
    async def scenario():
        ended = []

        async def sleeper(name):
            try:
                await asyncio.sleep(3600)
            finally:
                ended.append((name, tasks[2].cancelling()))  # (b asked to cancel yet?)

        async def refuses_then_fails():
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                raise RuntimeError("failed while stopping") from None

        async def failed():
            raise ValueError("failed before the stop")

        tasks = [asyncio.create_task(sleeper("a")), asyncio.create_task(refuses_then_fails()),
                 asyncio.create_task(sleeper("b")), asyncio.create_task(failed())]
        await asyncio.sleep(0)  # (each task started; the last one done)
        await cancel_and_wait(tasks[0], None, *tasks[1:])
        assert all(t.done() for t in tasks)
        assert ended == [("a", 1), ("b", 1)]  # b was asked before a had ended
        assert tasks[0].cancelled() and tasks[2].cancelled()
        assert isinstance(tasks[1].exception(), RuntimeError)
        assert isinstance(tasks[3].exception(), ValueError)
        await cancel_and_wait()  # nothing given: nothing to do
        await cancel_and_wait(None)

    asyncio.run(scenario())


def test_a_task_that_ends_by_itself_is_awaited_without_cancel():
    async def scenario():
        task = asyncio.create_task(asyncio.sleep(0, result="done"))
        await asyncio.sleep(0.01)
        await cancel_and_wait(task)
        assert task.result() == "done"

    asyncio.run(scenario())
