from curator.cli.entry import main

main()
