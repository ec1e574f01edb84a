"""Registration with each agent (`engram install` / `engram uninstall`) and what `engram doctor` finds wrong with it."""
