"""Django tasks (django.tasks) that sqljobs workers run."""

from django.tasks import TaskContext, task


@task(queue_name="billing", priority=10)
def charge(order_id: int) -> dict[str, int]:
    from shop.models import Order

    order = Order.objects.get(id=order_id)
    return {"order": order.id, "cents": 100 * len(order.customer)}


@task(takes_context=True)
def flaky(context: TaskContext, fail_times: int) -> int:
    if context.attempt <= fail_times:
        raise ValueError(f"attempt {context.attempt} fails")
    return context.attempt


@task()
async def shout(text: str) -> str:
    return text.upper()


@task()
def boom() -> None:
    raise KeyError("nothing here")
