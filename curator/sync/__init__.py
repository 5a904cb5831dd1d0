"""Keeping memory equal to the chat: dirty-floor detection, rollback, the swipe shelf."""
