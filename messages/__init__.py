"""The typed, frozen messages the MAPE-K phases hand to one another: the lowest layer every phase shares."""
