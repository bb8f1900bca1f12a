"""The airline domain's 14 tools, with the benchmark's semantics, return and error strings.

Faithful to the benchmark down to its quirks, since database hashes and observations must
agree: booking never changes seat counts; changing flights does not change the reservation's
cabin; cancelling does not check the reservation's status; an unknown reservation id is reported
as "user not found" by ``get_reservation_details``; a one-stop search reads the second leg's
status and prices on the first leg's date and writes next-day dates without zero padding.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

from envs.tau.db import Base, Db
from envs.tau.tools import (
    CALCULATE,
    THINK,
    TRANSFER_TO_HUMAN,
    Domain,
    Tool,
    array,
    obj,
    string,
)

NEW_RESERVATION_IDS = ("HATHAT", "HATHAU", "HATHAV")
CERTIFICATE_IDS = (3221322, 3221323, 3221324)
CABINS = ("basic_economy", "economy", "business")
AIRPORTS = {
    "SFO": "San Francisco", "JFK": "New York", "LAX": "Los Angeles", "ORD": "Chicago",
    "DFW": "Dallas", "DEN": "Denver", "SEA": "Seattle", "ATL": "Atlanta", "MIA": "Miami",
    "BOS": "Boston", "PHX": "Phoenix", "IAH": "Houston", "LAS": "Las Vegas", "MCO": "Orlando",
    "EWR": "Newark", "CLT": "Charlotte", "MSP": "Minneapolis", "DTW": "Detroit",
    "PHL": "Philadelphia", "LGA": "LaGuardia",
}


def _reservation_targets(base: Base, arguments: Mapping[str, Any]
                         ) -> tuple[tuple[str, str], ...]:
    reservation_id = arguments.get("reservation_id")
    if not isinstance(reservation_id, str):
        return ()
    reservation = base.tables["reservations"].get(reservation_id)
    user = (("users", reservation["user_id"]),) if reservation else ()
    return (("reservations", reservation_id),) + user


def _booking_targets(base: Base, arguments: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    del base
    user_id = arguments.get("user_id")
    user = (("users", user_id),) if isinstance(user_id, str) else ()
    return tuple(("reservations", r) for r in NEW_RESERVATION_IDS) + user


def _user_targets(base: Base, arguments: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    del base
    user_id = arguments.get("user_id")
    return (("users", user_id),) if isinstance(user_id, str) else ()


def get_user_details(db: Db, user_id: str) -> str:
    """The user profile as JSON."""
    if db.has("users", user_id):
        return json.dumps(db.read("users", user_id))
    return "Error: user not found"


def get_reservation_details(db: Db, reservation_id: str) -> str:
    """The reservation as JSON."""
    if db.has("reservations", reservation_id):
        return json.dumps(db.read("reservations", reservation_id))
    return "Error: user not found"


def list_all_airports(db: Db) -> str:
    """``{airport code: city}`` as JSON."""
    del db
    return json.dumps(AIRPORTS)


def _leg(flight: dict, date: str) -> dict:
    """A search result: the flight without its calendar, plus one date's status and prices."""
    result = {key: value for key, value in flight.items() if key != "dates"}
    result.update(flight["dates"][date])
    return result


def search_direct_flight(db: Db, origin: str, destination: str, date: str) -> str:
    """Direct flights between two airports that are available on a date, as JSON."""
    results = []
    for _, flight in db.items("flights"):
        if (flight["origin"] == origin and flight["destination"] == destination
                and date in flight["dates"] and flight["dates"][date]["status"] == "available"):
            results.append(_leg(flight, date))
    return json.dumps(results)


def search_onestop_flight(db: Db, origin: str, destination: str, date: str) -> str:
    """Pairs of connecting flights available from ``date``, as JSON."""
    flights = [flight for _, flight in db.items("flights")]
    results = []
    for first in flights:
        if first["origin"] != origin:
            continue
        for second in flights:
            if not (second["destination"] == destination
                    and first["destination"] == second["origin"]):
                continue
            overnight = "+1" in first["scheduled_arrival_time_est"]
            second_date = f"2024-05-{int(date[-2:]) + 1}" if overnight else date
            if first["scheduled_arrival_time_est"] > second["scheduled_departure_time_est"]:
                continue
            if (date in first["dates"] and second_date in second["dates"]
                    and first["dates"][date]["status"] == "available"
                    and second["dates"][second_date]["status"] == "available"):
                leg1 = {**_leg(first, date), "date": date}
                leg2 = {**_leg(second, date), "date": second_date}
                results.append([leg1, leg2])
    return json.dumps(results)


def _price_flights(db: Db, flights: list, cabin: str, passengers: list) -> tuple[int, str | None]:
    """Prices ``flights`` in place (price, origin, destination); total price or an error.
    ``len(passengers)`` is taken flight by flight, as the benchmark does: with no flights, a
    ``passengers`` that has no length is no error."""
    total = 0
    for flight in flights:
        number = flight["flight_number"]
        if not db.has("flights", number):
            return total, f"Error: flight {number} not found"
        record = db.read("flights", number)
        if flight["date"] not in record["dates"]:
            return total, f"Error: flight {number} not found on date {flight['date']}"
        on_date = record["dates"][flight["date"]]
        if on_date["status"] != "available":
            return total, f"Error: flight {number} not available on date {flight['date']}"
        if on_date["available_seats"][cabin] < len(passengers):
            return total, f"Error: not enough seats on flight {number}"
        flight["price"] = on_date["prices"][cabin]
        flight["origin"] = record["origin"]
        flight["destination"] = record["destination"]
        total += flight["price"] * len(passengers)
    return total, None


def book_reservation(db: Db, user_id: str, origin: str, destination: str, flight_type: str,
                     cabin: str, flights: list, passengers: list, payment_methods: list,
                     total_baggages: int, nonfree_baggages: int, insurance: str) -> str:
    """Books a reservation paid by the given methods (gift cards debited, certificates used)."""
    if not db.has("users", user_id):
        return "Error: user not found"
    reservation_id = next((r for r in NEW_RESERVATION_IDS[:-1]
                           if not db.has("reservations", r)), NEW_RESERVATION_IDS[-1])
    reservation = {
        "reservation_id": reservation_id, "user_id": user_id, "origin": origin,
        "destination": destination, "flight_type": flight_type, "cabin": cabin,
        "flights": copy.deepcopy(flights), "passengers": passengers,
        "payment_history": payment_methods, "created_at": "2024-05-15T15:00:00",
        "total_baggages": total_baggages, "nonfree_baggages": nonfree_baggages,
        "insurance": insurance,
    }
    total, error = _price_flights(db, reservation["flights"], cabin, passengers)
    if error:
        return error
    if insurance == "yes":
        total += 30 * len(passengers)
    total += 50 * nonfree_baggages
    methods = db.read("users", user_id)["payment_methods"]
    for payment in payment_methods:
        payment_id, amount = payment["payment_id"], payment["amount"]
        if payment_id not in methods:
            return f"Error: payment method {payment_id} not found"
        if methods[payment_id]["source"] in ("gift_card", "certificate") and (
                methods[payment_id]["amount"] < amount):
            return f"Error: not enough balance in payment method {payment_id}"
    paid = sum(payment["amount"] for payment in payment_methods)
    if paid != total:
        return (f"Error: payment amount does not add up, total price is {total}, "
                f"but paid {paid}")
    user = db.edit("users", user_id)
    for payment in payment_methods:
        payment_id = payment["payment_id"]
        if user["payment_methods"][payment_id]["source"] == "gift_card":
            user["payment_methods"][payment_id]["amount"] -= payment["amount"]
        elif user["payment_methods"][payment_id]["source"] == "certificate":
            del user["payment_methods"][payment_id]
    db.insert("reservations", reservation_id, reservation)
    user["reservations"].append(reservation_id)
    return json.dumps(reservation)


def cancel_reservation(db: Db, reservation_id: str) -> str:
    """Cancels a reservation: every payment gets a negative (refund) entry."""
    if not db.has("reservations", reservation_id):
        return "Error: reservation not found"
    reservation = db.edit("reservations", reservation_id)
    refunds = [{"payment_id": payment["payment_id"], "amount": -payment["amount"]}
               for payment in reservation["payment_history"]]
    reservation["payment_history"].extend(refunds)
    reservation["status"] = "cancelled"
    return json.dumps(reservation)


def _update_payment(db: Db, reservation: dict, payment_id: str, total: int
                    ) -> tuple[dict | None, str | None]:
    """The user's payment method for an update charge, or the benchmark's refusal."""
    methods = db.read("users", reservation["user_id"])["payment_methods"]
    if payment_id not in methods:
        return None, "Error: payment method not found"
    method = methods[payment_id]
    if method["source"] == "certificate":
        return None, "Error: certificate cannot be used to update reservation"
    if method["source"] == "gift_card" and method["amount"] < total:
        return None, "Error: gift card balance is not enough"
    return method, None


def _charge(db: Db, reservation: dict, payment_id: str, method: dict, total: int) -> None:
    """Debits a gift card and records a non-zero charge in the payment history."""
    if method["source"] == "gift_card":
        card = db.edit("users", reservation["user_id"])["payment_methods"][payment_id]
        card["amount"] -= total
    if total != 0:
        reservation["payment_history"].append({"payment_id": payment_id, "amount": total})


def update_reservation_baggages(db: Db, reservation_id: str, total_baggages: int,
                                nonfree_baggages: int, payment_id: str) -> str:
    """Sets the bag counts; each additional non-free bag costs 50."""
    if not db.has("reservations", reservation_id):
        return "Error: reservation not found"
    reservation = db.read("reservations", reservation_id)
    total = 50 * max(0, nonfree_baggages - reservation["nonfree_baggages"])
    method, error = _update_payment(db, reservation, payment_id, total)
    if error:
        return error
    reservation = db.edit("reservations", reservation_id)
    reservation["total_baggages"] = total_baggages
    reservation["nonfree_baggages"] = nonfree_baggages
    _charge(db, reservation, payment_id, method, total)
    return json.dumps(reservation)


def update_reservation_flights(db: Db, reservation_id: str, cabin: str, flights: list,
                               payment_id: str) -> str:
    """Replaces the flights; kept flights (same number, date and cabin) keep their price."""
    if not db.has("reservations", reservation_id):
        return "Error: reservation not found"
    reservation = db.read("reservations", reservation_id)
    passengers = len(reservation["passengers"])
    flights = copy.deepcopy(flights)
    total = 0
    for flight in flights:
        kept = [f for f in reservation["flights"]
                if f["flight_number"] == flight["flight_number"] and f["date"] == flight["date"]
                and cabin == reservation["cabin"]]
        if kept:
            flight["price"] = kept[0]["price"]
            flight["origin"] = kept[0]["origin"]
            flight["destination"] = kept[0]["destination"]
            total += flight["price"] * passengers
            continue
        price, error = _price_flights(db, [flight], cabin, reservation["passengers"])
        if error:
            return error
        total += price
    total -= sum(flight["price"] for flight in reservation["flights"]) * passengers
    method, error = _update_payment(db, reservation, payment_id, total)
    if error:
        return error
    reservation = db.edit("reservations", reservation_id)
    reservation["flights"] = flights
    _charge(db, reservation, payment_id, method, total)
    return json.dumps(reservation)


def update_reservation_passengers(db: Db, reservation_id: str, passengers: list) -> str:
    """Replaces the passengers (their number must stay the same)."""
    if not db.has("reservations", reservation_id):
        return "Error: reservation not found"
    if len(passengers) != len(db.read("reservations", reservation_id)["passengers"]):
        return "Error: number of passengers does not match"
    reservation = db.edit("reservations", reservation_id)
    reservation["passengers"] = passengers
    return json.dumps(reservation)


def send_certificate(db: Db, user_id: str, amount: int) -> str:
    """Adds a travel certificate to the user's payment methods (at most three per task)."""
    if not db.has("users", user_id):
        return "Error: user not found"
    user = db.read("users", user_id)
    for number in CERTIFICATE_IDS:
        payment_id = f"certificate_{number}"
        if payment_id not in user["payment_methods"]:
            db.edit("users", user_id)["payment_methods"][payment_id] = {
                "source": "certificate", "amount": amount, "id": payment_id}
            return f"Certificate {payment_id} added to user {user_id} with amount {amount}."
    return "None"  # the benchmark's tool returns None when all three ids are taken


_RESERVATION_ID = string("The reservation id, such as '8JX2WO'.")
_USER_ID = string("The user id, such as 'sara_doe_496'.")
_CABIN = string("The cabin class.", CABINS)
_DATE = string("Date in 'YYYY-MM-DD' format, such as '2024-05-01'.")
_FLIGHTS = array("Every flight of the reservation, in order.", obj({
    "flight_number": string("Flight number, such as 'HAT001'."), "date": _DATE}))
_PASSENGERS = array("The passengers.", obj({
    "first_name": string("First name, such as 'Noah'."),
    "last_name": string("Last name, such as 'Brown'."),
    "dob": string("Date of birth in 'YYYY-MM-DD' format.")}))
_PAYMENTS = array("How the booking is paid: each entry a payment method id and the amount "
                  "charged to it. At most one travel certificate, one credit card and three "
                  "gift cards.", obj({
                      "payment_id": string("Payment method id, such as 'credit_card_7815826'."),
                      "amount": {"type": "number", "description": "The amount charged."}}))
_CONFIRM = " List the details and get explicit confirmation (yes) from the user first."
_AIRPORT = "Airport code, such as 'JFK'."
_SEARCH = {"origin": string(_AIRPORT), "destination": string(_AIRPORT), "date": _DATE}

TOOLS = (
    Tool("book_reservation", "Book a reservation." + _CONFIRM,
         {"user_id": _USER_ID, "origin": string(_AIRPORT), "destination": string(_AIRPORT),
          "flight_type": string("One way or round trip.", ("one_way", "round_trip")),
          "cabin": _CABIN, "flights": _FLIGHTS, "passengers": _PASSENGERS,
          "payment_methods": _PAYMENTS,
          "total_baggages": {"type": "integer", "description": "Total number of bags."},
          "nonfree_baggages": {"type": "integer", "description": "Number of paid bags."},
          "insurance": string("Whether travel insurance is bought.", ("yes", "no"))},
         book_reservation, writes=True, targets=_booking_targets),
    CALCULATE,
    Tool("cancel_reservation", "Cancel a whole reservation." + _CONFIRM,
         {"reservation_id": _RESERVATION_ID},
         cancel_reservation, writes=True, targets=_reservation_targets),
    Tool("get_reservation_details", "Get the details of a reservation.",
         {"reservation_id": _RESERVATION_ID}, get_reservation_details),
    Tool("get_user_details", "Get a user's details, including their reservations.",
         {"user_id": _USER_ID}, get_user_details),
    Tool("list_all_airports", "List every airport code and its city.", {}, list_all_airports),
    Tool("search_direct_flight", "Search direct flights between two airports on a date.",
         dict(_SEARCH), search_direct_flight),
    Tool("search_onestop_flight",
         "Search one-stop flights between two airports departing on a date.",
         dict(_SEARCH), search_onestop_flight),
    Tool("send_certificate",
         "Send the user a travel certificate as compensation, for example for a cancelled or "
         "delayed flight." + _CONFIRM,
         {"user_id": _USER_ID,
          "amount": {"type": "number", "description": "The certificate amount."}},
         send_certificate, writes=True, targets=_user_targets),
    THINK,
    TRANSFER_TO_HUMAN,
    Tool("update_reservation_baggages",
         "Update the baggage of a reservation." + _CONFIRM,
         {"reservation_id": _RESERVATION_ID,
          "total_baggages": {"type": "integer", "description": "The new total number of bags."},
          "nonfree_baggages": {"type": "integer",
                               "description": "The new number of paid bags."},
          "payment_id": string("Payment method id for the extra bags, such as "
                               "'credit_card_7815826'; not a certificate.")},
         update_reservation_baggages, writes=True, targets=_reservation_targets),
    Tool("update_reservation_flights",
         "Update the flights of a reservation (all flights, changed or not)." + _CONFIRM,
         {"reservation_id": _RESERVATION_ID, "cabin": _CABIN, "flights": _FLIGHTS,
          "payment_id": string("Payment method id for the price difference, such as "
                               "'credit_card_7815826'; not a certificate.")},
         update_reservation_flights, writes=True, targets=_reservation_targets),
    Tool("update_reservation_passengers",
         "Update the passengers of a reservation (the number of passengers stays the same)."
         + _CONFIRM,
         {"reservation_id": _RESERVATION_ID, "passengers": _PASSENGERS},
         update_reservation_passengers, writes=True, targets=_reservation_targets),
)

AIRLINE = Domain("airline", TOOLS)
