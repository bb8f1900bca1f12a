"""The retail domain's 16 tools, with the benchmark's semantics, return and error strings.

Every write follows the benchmark field for field (which fields change and in what order,
status strings, payment-history entries, gift-card balances rounded to cents), so database
hashes agree with it. Reads return the record as ``json.dumps`` text.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from envs.tau.db import Base, Db
from envs.tau.tools import CALCULATE, THINK, TRANSFER_TO_HUMAN, Domain, Tool, array, string

CANCEL_REASONS = ("no longer needed", "ordered by mistake")
ADDRESS_FIELDS = ("address1", "address2", "city", "state", "country", "zip")


def _order_targets(base: Base, arguments: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    order_id = arguments.get("order_id")
    if not isinstance(order_id, str):
        return ()
    order = base.tables["orders"].get(order_id)
    return (("orders", order_id),) + ((("users", order["user_id"]),) if order else ())


def _user_targets(base: Base, arguments: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    del base
    user_id = arguments.get("user_id")
    return (("users", user_id),) if isinstance(user_id, str) else ()


def _address(*values: str) -> dict[str, str]:
    """An address record, fields in the benchmark's order."""
    return dict(zip(ADDRESS_FIELDS, values))


def _get(db: Db, table: str, key: str, missing: str) -> str:
    return json.dumps(db.read(table, key)) if db.has(table, key) else missing


def get_order_details(db: Db, order_id: str) -> str:
    """The order as JSON."""
    return _get(db, "orders", order_id, "Error: order not found")


def get_product_details(db: Db, product_id: str) -> str:
    """The product (with all its variants) as JSON."""
    return _get(db, "products", product_id, "Error: product not found")


def get_user_details(db: Db, user_id: str) -> str:
    """The user profile as JSON."""
    return _get(db, "users", user_id, "Error: user not found")


def find_user_id_by_email(db: Db, email: str) -> str:
    """The id of the first user whose email matches, ignoring case."""
    for user_id, user in db.items("users"):
        if user["email"].lower() == email.lower():
            return user_id
    return "Error: user not found"


def find_user_id_by_name_zip(db: Db, first_name: str, last_name: str, zip: str) -> str:
    """The id of the first user with this name (ignoring case) and zip code."""
    for user_id, user in db.items("users"):
        if (user["name"]["first_name"].lower() == first_name.lower()
                and user["name"]["last_name"].lower() == last_name.lower()
                and user["address"]["zip"] == zip):
            return user_id
    return "Error: user not found"


def list_all_product_types(db: Db) -> str:
    """``{product name: product id}`` sorted by name, as JSON."""
    names = {product["name"]: product["product_id"] for _, product in db.items("products")}
    return json.dumps(dict(sorted(names.items())))


def _missing_item(order: dict, item_ids: list) -> list:
    """``[the first item id requested more often than the order holds it]``, or ``[]`` (a list:
    the id itself may be null)."""
    held = [item["item_id"] for item in order["items"]]
    return [item_id for item_id in item_ids if item_ids.count(item_id) > held.count(item_id)][:1]


def _price_difference(db: Db, order: dict, item_ids: list, new_item_ids: list
                      ) -> tuple[float, None] | tuple[None, str]:
    """Sum of (new price - old price) over the swapped items, or an error for a bad new item."""
    difference = 0
    for item_id, new_item_id in zip(item_ids, new_item_ids):
        item = next(item for item in order["items"] if item["item_id"] == item_id)
        variants = db.read("products", item["product_id"])["variants"]
        if not (new_item_id in variants and variants[new_item_id]["available"]):
            return None, f"Error: new item {new_item_id} not found or available"
        difference += variants[new_item_id]["price"] - item["price"]
    return difference, None


def cancel_pending_order(db: Db, order_id: str, reason: str) -> str:
    """Cancels a pending order; refunds every payment, gift cards at once."""
    _, error = _order_in_status(db, order_id, "pending",
                                "Error: non-pending order cannot be cancelled")
    if error:
        return error
    if reason not in CANCEL_REASONS:
        return "Error: invalid reason"
    order = db.edit("orders", order_id)
    refunds = []
    for payment in order["payment_history"]:
        method_id = payment["payment_method_id"]
        refunds.append({"transaction_type": "refund", "amount": payment["amount"],
                        "payment_method_id": method_id})
        if "gift_card" in method_id:
            method = db.edit("users", order["user_id"])["payment_methods"][method_id]
            method["balance"] = round(method["balance"] + payment["amount"], 2)
    order["status"] = "cancelled"
    order["cancel_reason"] = reason
    order["payment_history"].extend(refunds)
    return json.dumps(order)


def _swap_difference(db: Db, order: dict, item_ids: list, new_item_ids: list
                     ) -> tuple[float | None, str | None]:
    """The price difference of swapping items, or the benchmark's error for a bad swap."""
    missing = _missing_item(order, item_ids)
    if missing:
        return 0.0, f"Error: {missing[0]} not found"
    if len(item_ids) != len(new_item_ids):
        return 0.0, "Error: the number of items to be exchanged should match"
    return _price_difference(db, order, item_ids, new_item_ids)


def exchange_delivered_order_items(db: Db, order_id: str, item_ids: list, new_item_ids: list,
                                   payment_method_id: str) -> str:
    """Requests an exchange of delivered items for variants of the same products."""
    order, error = _order_in_status(db, order_id, "delivered",
                                    "Error: non-delivered order cannot be exchanged")
    if error:
        return error
    difference, error = _swap_difference(db, order, item_ids, new_item_ids)
    if error:
        return error
    difference = round(difference, 2)
    _, error = _paying_method(db, order, payment_method_id, difference, "the price difference")
    if error:
        return error
    order = db.edit("orders", order_id)
    order["status"] = "exchange requested"
    order["exchange_items"] = sorted(item_ids)
    order["exchange_new_items"] = sorted(new_item_ids)
    order["exchange_payment_method_id"] = payment_method_id
    order["exchange_price_difference"] = difference
    return json.dumps(order)


def _order_in_status(db: Db, order_id: str, status: str, wrong_status: str
                     ) -> tuple[dict | None, str | None]:
    """The order if it exists and has `status`, else the benchmark's error."""
    if not db.has("orders", order_id):
        return None, "Error: order not found"
    order = db.read("orders", order_id)
    if order["status"] != status:
        return None, wrong_status
    return order, None


def _pending_order(db: Db, order_id: str) -> tuple[dict | None, str | None]:
    return _order_in_status(db, order_id, "pending", "Error: non-pending order cannot be modified")


def _paying_method(db: Db, order: dict, payment_method_id: str, amount: float, what: str
                   ) -> tuple[dict | None, str | None]:
    """The order's user's payment method if it can pay `amount`, else the benchmark's error."""
    methods = db.read("users", order["user_id"])["payment_methods"]
    if payment_method_id not in methods:
        return None, "Error: payment method not found"
    method = methods[payment_method_id]
    if method["source"] == "gift_card" and method["balance"] < amount:
        return None, f"Error: insufficient gift card balance to pay for {what}"
    return method, None


def modify_pending_order_address(db: Db, order_id: str, address1: str, address2: str,
                                 city: str, state: str, country: str, zip: str) -> str:
    """Replaces the shipping address of a pending order."""
    _, error = _pending_order(db, order_id)
    if error:
        return error
    order = db.edit("orders", order_id)
    order["address"] = _address(address1, address2, city, state, country, zip)
    return json.dumps(order)


def modify_pending_order_items(db: Db, order_id: str, item_ids: list, new_item_ids: list,
                               payment_method_id: str) -> str:
    """Swaps items of a pending order for other variants; pays or refunds the difference."""
    order, error = _pending_order(db, order_id)
    if error:
        return error
    difference, error = _swap_difference(db, order, item_ids, new_item_ids)
    if error:
        return error
    method, error = _paying_method(db, order, payment_method_id, difference, "the new item")
    if error:
        return error
    order = db.edit("orders", order_id)
    order["payment_history"].append({
        "transaction_type": "payment" if difference > 0 else "refund",
        "amount": abs(difference), "payment_method_id": payment_method_id})
    if method["source"] == "gift_card":
        method = db.edit("users", order["user_id"])["payment_methods"][payment_method_id]
        method["balance"] = round(method["balance"] - difference, 2)
    for item_id, new_item_id in zip(item_ids, new_item_ids):
        item = next(item for item in order["items"] if item["item_id"] == item_id)
        variant = db.read("products", item["product_id"])["variants"][new_item_id]
        item["item_id"] = new_item_id
        item["price"] = variant["price"]
        item["options"] = dict(variant["options"])
    order["status"] = "pending (item modified)"
    return json.dumps(order)


def modify_pending_order_payment(db: Db, order_id: str, payment_method_id: str) -> str:
    """Moves a pending order's single payment to another method (a payment plus a refund)."""
    order, error = _pending_order(db, order_id)
    if error:
        return error
    methods = db.read("users", order["user_id"])["payment_methods"]
    if payment_method_id not in methods:
        return "Error: payment method not found"
    history = order["payment_history"]
    if len(history) > 1 or history[0]["transaction_type"] != "payment":
        return "Error: there should be exactly one payment for a pending order"
    old_method_id = history[0]["payment_method_id"]
    if old_method_id == payment_method_id:
        return "Error: the new payment method should be different from the current one"
    amount = history[0]["amount"]
    if methods[payment_method_id]["source"] == "gift_card" and (
            methods[payment_method_id]["balance"] < amount):
        return "Error: insufficient gift card balance to pay for the order"
    order = db.edit("orders", order_id)
    order["payment_history"].extend([
        {"transaction_type": "payment", "amount": amount, "payment_method_id": payment_method_id},
        {"transaction_type": "refund", "amount": amount, "payment_method_id": old_method_id},
    ])
    if methods[payment_method_id]["source"] == "gift_card":
        new = db.edit("users", order["user_id"])["payment_methods"][payment_method_id]
        new["balance"] = round(new["balance"] - amount, 2)
    if "gift_card" in old_method_id:
        old = db.edit("users", order["user_id"])["payment_methods"][old_method_id]
        old["balance"] = round(old["balance"] + amount, 2)
    return json.dumps(order)


def modify_user_address(db: Db, user_id: str, address1: str, address2: str, city: str,
                        state: str, country: str, zip: str) -> str:
    """Replaces a user's default address."""
    if not db.has("users", user_id):
        return "Error: user not found"
    user = db.edit("users", user_id)
    user["address"] = _address(address1, address2, city, state, country, zip)
    return json.dumps(user)


def return_delivered_order_items(db: Db, order_id: str, item_ids: list,
                                 payment_method_id: str) -> str:
    """Requests a return of delivered items, refunded to the original method or a gift card."""
    order, error = _order_in_status(db, order_id, "delivered",
                                    "Error: non-delivered order cannot be returned")
    if error:
        return error
    if payment_method_id not in db.read("users", order["user_id"])["payment_methods"]:
        return "Error: payment method not found"
    if ("gift_card" not in payment_method_id
            and payment_method_id != order["payment_history"][0]["payment_method_id"]):
        return "Error: payment method should be either the original payment method or a gift card"
    if _missing_item(order, item_ids):
        return "Error: some item not found"
    order = db.edit("orders", order_id)
    order["status"] = "return requested"
    order["return_items"] = sorted(item_ids)
    order["return_payment_method_id"] = payment_method_id
    return json.dumps(order)


_ORDER_ID = string("The order id, such as '#W0000000' (it starts with '#').")
_ITEM_IDS = array("Item ids, each such as '1008292230'; an id may repeat.", {"type": "string"})
_NEW_ITEM_IDS = array("The new item ids, position by position: each a variant of the same "
                      "product as the item it replaces.", {"type": "string"})
_PAYMENT_ID = string("A payment method id of the user, such as 'gift_card_0000000' or "
                     "'credit_card_0000000' (see the user or order details).")
_ADDRESS = {
    "address1": string("First address line, such as '123 Main St'."),
    "address2": string("Second address line, such as 'Apt 1', or ''."),
    "city": string("City, such as 'San Francisco'."),
    "state": string("State, such as 'CA'."),
    "country": string("Country, such as 'USA'."),
    "zip": string("Zip code, such as '12345'."),
}
_CONFIRM = " List the details and get explicit confirmation (yes) from the user first."

TOOLS = (
    CALCULATE,
    Tool("cancel_pending_order",
         "Cancel a pending order (processed or delivered orders cannot be cancelled). Its status "
         "becomes 'cancelled' and every payment is refunded: to a gift card at once, to other "
         "methods in 5-7 business days. Returns the updated order." + _CONFIRM,
         {"order_id": _ORDER_ID,
          "reason": string("Why the order is cancelled.", CANCEL_REASONS)},
         cancel_pending_order, writes=True, targets=_order_targets),
    Tool("exchange_delivered_order_items",
         "Exchange items of a delivered order for other variants of the same products. A "
         "delivered order can be returned or exchanged only once." + _CONFIRM,
         {"order_id": _ORDER_ID, "item_ids": _ITEM_IDS, "new_item_ids": _NEW_ITEM_IDS,
          "payment_method_id": _PAYMENT_ID},
         exchange_delivered_order_items, writes=True, targets=_order_targets),
    Tool("find_user_id_by_email", "Find a user's id by email; an error if there is none.",
         {"email": string("The email, such as 'something@example.com'.")},
         find_user_id_by_email),
    Tool("find_user_id_by_name_zip",
         "Find a user's id by first name, last name and zip code; an error if there is none. "
         "Prefer looking users up by email; use this when the email is unknown or not found.",
         {"first_name": string("First name, such as 'John'."),
          "last_name": string("Last name, such as 'Doe'."),
          "zip": string("Zip code, such as '12345'.")},
         find_user_id_by_name_zip),
    Tool("get_order_details", "Get the status and details of an order.",
         {"order_id": _ORDER_ID}, get_order_details),
    Tool("get_product_details", "Get a product and the details of all its variants.",
         {"product_id": string("The product id, such as '6086499569'; not an item id.")},
         get_product_details),
    Tool("get_user_details", "Get a user's details, including their orders.",
         {"user_id": string("The user id, such as 'sara_doe_496'.")}, get_user_details),
    Tool("list_all_product_types",
         "List the name and product id of every product type in the store (50 in all).",
         {}, list_all_product_types),
    Tool("modify_pending_order_address",
         "Change the shipping address of a pending order." + _CONFIRM,
         {"order_id": _ORDER_ID, **_ADDRESS},
         modify_pending_order_address, writes=True, targets=_order_targets),
    Tool("modify_pending_order_items",
         "Modify items of a pending order to other variants of the same products. This can be "
         "done only once per order." + _CONFIRM,
         {"order_id": _ORDER_ID, "item_ids": _ITEM_IDS, "new_item_ids": _NEW_ITEM_IDS,
          "payment_method_id": _PAYMENT_ID},
         modify_pending_order_items, writes=True, targets=_order_targets),
    Tool("modify_pending_order_payment",
         "Change the payment method of a pending order." + _CONFIRM,
         {"order_id": _ORDER_ID, "payment_method_id": _PAYMENT_ID},
         modify_pending_order_payment, writes=True, targets=_order_targets),
    Tool("modify_user_address", "Change a user's default address." + _CONFIRM,
         {"user_id": string("The user id, such as 'sara_doe_496'."), **_ADDRESS},
         modify_user_address, writes=True, targets=_user_targets),
    Tool("return_delivered_order_items",
         "Return items of a delivered order; its status becomes 'return requested' and the "
         "user gets an email on how to send them back." + _CONFIRM,
         {"order_id": _ORDER_ID, "item_ids": _ITEM_IDS,
          "payment_method_id": string("Where the refund goes: the original payment method or "
                                      "a gift card of the user.")},
         return_delivered_order_items, writes=True, targets=_order_targets),
    THINK,
    TRANSFER_TO_HUMAN,
)

RETAIL = Domain("retail", TOOLS)
